package io.txnlog.spark;

import java.net.URISyntaxException;

import org.apache.spark.SparkContext;

/** This jar as Spark's executors see it: added to the Spark context once, so tasks load its classes. */
final class Jar {
    private static final String NAME = "txnlog-spark.jar";

    private Jar() {
    }

    /**
     * Add this jar to the running Spark context unless a jar of its name is there already.
     *
     * @throws IllegalStateException the jar's location cannot be named
     */
    static synchronized void ship() {
        SparkContext sc = SparkContext.getOrCreate();
        scala.collection.Iterator<String> jars = sc.listJars().iterator();
        while (jars.hasNext()) {
            if (jars.next().endsWith("/" + NAME)) {
                return;
            }
        }
        try {
            sc.addJar(Jar.class.getProtectionDomain().getCodeSource().getLocation().toURI().toString());
        } catch (URISyntaxException e) {
            throw new IllegalStateException("txnlog: cannot name the location of " + NAME, e);
        }
    }

    /** Run {@code body} with this jar's class loader as the thread's context class loader (Spark's lookups). */
    static <T> T withLoader(java.util.function.Supplier<T> body) {
        Thread thread = Thread.currentThread();
        ClassLoader previous = thread.getContextClassLoader();
        thread.setContextClassLoader(Jar.class.getClassLoader());
        try {
            return body.get();
        } finally {
            thread.setContextClassLoader(previous);
        }
    }
}

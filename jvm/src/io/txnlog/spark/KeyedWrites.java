package io.txnlog.spark;

import java.net.URISyntaxException;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.DataFrameWriter;

/**
 * Runs a {@link KeyedParquetFormat} write for a driver that loaded this jar at run time (in a class loader of its
 * own, which Spark's executors and Spark's data source lookup do not see).
 *
 * <p>Contract: {@link #save} adds the jar to the Spark context once (so executors load the format's writer
 * classes), then saves the writer's rows with the format, resolving it through this jar's class loader; the
 * thread's context class loader is restored afterwards. Errors are Spark's.
 */
public final class KeyedWrites {
    private static final String JAR_NAME = "txnlog-spark.jar";

    /** Save {@code writer}'s rows to {@code path} with {@link KeyedParquetFormat} (options already set). */
    public void save(DataFrameWriter<?> writer, String path) throws URISyntaxException {
        shipJar();
        Thread thread = Thread.currentThread();
        ClassLoader previous = thread.getContextClassLoader();
        thread.setContextClassLoader(KeyedWrites.class.getClassLoader());
        try {
            writer.format(KeyedParquetFormat.class.getName()).save(path);
        } finally {
            thread.setContextClassLoader(previous);
        }
    }

    private static synchronized void shipJar() throws URISyntaxException {
        SparkContext sc = SparkContext.getOrCreate();
        scala.collection.Iterator<String> jars = sc.listJars().iterator();
        while (jars.hasNext()) {
            if (jars.next().endsWith("/" + JAR_NAME)) {
                return;
            }
        }
        sc.addJar(KeyedWrites.class.getProtectionDomain().getCodeSource().getLocation().toURI().toString());
    }
}

package io.txnlog.spark;

import java.io.File;
import java.io.IOException;
import java.net.InetAddress;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
import org.apache.spark.api.python.PythonUtils;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

import py4j.ClientServer;

/**
 * txnlog's Python planner for the rules of {@link TxnlogSparkSessionExtension}: a Python process this JVM starts
 * on the first txnlog query of the application ({@code python -c "import pyspark_txnlog; pyspark_txnlog.serve()"},
 * with the interpreter Spark runs Python workers with) and keeps until the JVM exits (it exits when its standard
 * input, a pipe from this JVM, closes). It connects back to this JVM through a py4j server authenticated by a
 * random secret (as PySpark's own driver does), wraps a session of this Spark application, and registers the read
 * planner and the write planner ({@link #register}); the rules then call them through py4j.
 *
 * <p>If the process cannot be started or does not register within {@link #START_SECONDS} seconds, every later ask
 * fails with {@link Unavailable} (the rules then leave txnlog reads and writes to the Python data source, or
 * fail under {@code readPath}/{@code writePath} = {@code native}), without starting it again.
 */
public final class PythonSide {
    /** Seconds the Python process has to start and register. */
    static final long START_SECONDS = 120;

    /** Why txnlog's Python planner cannot be asked. */
    static final class Unavailable extends RuntimeException {
        Unavailable(String why, Throwable cause) {
            super(why, cause);
        }
    }

    private static PythonSide running;
    private static String failed;

    private final SparkSession session;
    private final CountDownLatch registered = new CountDownLatch(1);
    private volatile NativeReadRule.Planner planner;
    private volatile NativeWriteRule.Writer writer;
    private ClientServer server;
    private Process process;

    private PythonSide(SparkSession session) {
        this.session = session;
    }

    /** The session the Python planner builds its plans in (called by the Python process). */
    public SparkSession session() {
        return session;
    }

    /** Register the Python planner's read and write sides (called by the Python process). */
    public void register(NativeReadRule.Planner readPlanner, NativeWriteRule.Writer writePlanner) {
        this.planner = readPlanner;
        this.writer = writePlanner;
        registered.countDown();
    }

    /** The read planner, the Python process started first when need be. @throws Unavailable see the class. */
    static NativeReadRule.Planner planner(SparkSession session) {
        return get(session).planner;
    }

    /** The write planner, the Python process started first when need be. @throws Unavailable see the class. */
    static NativeWriteRule.Writer writer(SparkSession session) {
        return get(session).writer;
    }

    /** Whether {@code session} holds a rule of class {@code rule} among its extra optimizations (enable_native). */
    static boolean sessionHasRule(SparkSession session, Class<?> rule) {
        scala.collection.Iterator<Rule<LogicalPlan>> rules = session.experimental().extraOptimizations().iterator();
        while (rules.hasNext()) {
            if (rules.next().getClass().getName().equals(rule.getName())) {
                return true;
            }
        }
        return false;
    }

    private static synchronized PythonSide get(SparkSession session) {
        if (running != null && running.process.isAlive()) {
            return running;
        }
        if (failed != null) {
            throw new Unavailable(failed, null);
        }
        if (running != null) {
            running.stop();
            running = null;
        }
        PythonSide side = new PythonSide(session.newSession());
        try {
            side.start(session.sparkContext().conf());
        } catch (IOException | RuntimeException e) {
            side.stop();
            failed = "txnlog's Python planner did not start: " + e.getMessage();
            throw new Unavailable(failed, e);
        } catch (InterruptedException e) {
            side.stop();
            Thread.currentThread().interrupt();
            throw new Unavailable("interrupted while txnlog's Python planner started", e);
        }
        running = side;
        return side;
    }

    private void start(SparkConf conf) throws IOException, InterruptedException {
        byte[] bytes = new byte[32];
        new SecureRandom().nextBytes(bytes);
        String secret = HexFormat.of().formatHex(bytes);
        server = Jar.withLoader(() -> {
            ClientServer s = new ClientServer.ClientServerBuilder(this).authToken(secret).javaPort(0)
                    .javaAddress(InetAddress.getLoopbackAddress()).build();
            s.startServer();
            return s;
        });
        String python = python(conf);
        ProcessBuilder builder = new ProcessBuilder(python, "-c", "import pyspark_txnlog; pyspark_txnlog.serve()");
        Map<String, String> env = builder.environment();
        env.put("PYSPARK_GATEWAY_PORT", Integer.toString(server.getJavaServer().getListeningPort()));
        env.put("PYSPARK_GATEWAY_SECRET", secret);
        env.put("PYSPARK_PIN_THREAD", "true");
        List<String> paths = new ArrayList<>();
        paths.add(PythonUtils.sparkPythonPath());
        if (env.get("PYTHONPATH") != null) {
            paths.add(env.get("PYTHONPATH"));
        }
        env.put("PYTHONPATH", PythonUtils.mergePythonPaths(
                scala.jdk.javaapi.CollectionConverters.asScala(paths).toSeq()));
        builder.redirectOutput(ProcessBuilder.Redirect.INHERIT).redirectError(ProcessBuilder.Redirect.INHERIT);
        builder.directory(new File(System.getProperty("user.dir")));
        process = builder.start();
        Process started = process;
        Runtime.getRuntime().addShutdownHook(new Thread(started::destroy, "txnlog-python-planner-stop"));
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(START_SECONDS);
        while (!registered.await(200, TimeUnit.MILLISECONDS)) {
            if (!process.isAlive()) {
                throw new IllegalStateException(python + " exited with status " + process.exitValue()
                        + " (it needs pyspark and txnlog installed; its error is in the driver's standard error)");
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(python + " did not register within " + START_SECONDS + " s");
            }
        }
    }

    private void stop() {
        if (process != null) {
            process.destroy();
        }
        if (server != null) {
            server.shutdown();
        }
    }

    /** The interpreter Spark runs Python workers with: {@code spark.pyspark.python}, PYSPARK_PYTHON, python3. */
    private static String python(SparkConf conf) {
        String python = conf.get("spark.pyspark.python", null);
        if (python == null || python.isBlank()) {
            python = System.getenv("PYSPARK_PYTHON");
        }
        return python == null || python.isBlank() ? "python3" : python;
    }

    /** The write rule's writer for one session: the Python planner's, unless enable_native's rule acts there. */
    static final class SessionWriter implements NativeWriteRule.Writer {
        private final SparkSession session;

        SessionWriter(SparkSession session) {
            this.session = session;
        }

        @Override
        public Object plan(String optionsJson, String schemaJson) {
            return ask(optionsJson, "this", w -> w.plan(optionsJson, schemaJson));
        }

        @Override
        public void insert(Object dataset, String optionsJson) {
            writer(session).insert(dataset, optionsJson);
        }

        @Override
        public Object planStream(String optionsJson, String schemaJson) {
            return ask(optionsJson, "this stream", w -> w.planStream(optionsJson, schemaJson));
        }

        /**
         * The planner's answer ({@code question} put to its writer), or null where enable_native's rule acts or
         * {@code writePath = python}; when the planner cannot be had, an error text for {@code writePath =
         * native} (naming {@code what} cannot be written), else null.
         */
        private Object ask(String optionsJson, String what,
                           java.util.function.Function<NativeWriteRule.Writer, Object> question) {
            if (sessionHasRule(session, NativeWriteRule.class) || "python".equals(writePath(optionsJson))) {
                return null;
            }
            try {
                return question.apply(writer(session));
            } catch (Unavailable e) {
                return "native".equals(writePath(optionsJson))
                        ? "txnlog: option 'writePath' = 'native' cannot write " + what + ": " + e.getMessage() : null;
            }
        }

        @Override
        public void insertStream(Object dataset, String optionsJson, String queryId, long batchId) {
            writer(session).insertStream(dataset, optionsJson, queryId, batchId);
        }

        private static String writePath(String optionsJson) {
            Map<String, String> options = Options.fromJson(optionsJson,
                    new com.fasterxml.jackson.core.type.TypeReference<Map<String, String>>() { });
            for (Map.Entry<String, String> e : options.entrySet()) {
                if (e.getKey().equalsIgnoreCase("writePath")) {
                    return e.getValue().trim().toLowerCase(java.util.Locale.ROOT);
                }
            }
            return "auto";
        }
    }
}

package io.txnlog.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.read.streaming.SparkDataStream;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import org.apache.spark.sql.execution.datasources.v2.StreamingDataSourceV2ScanRelation;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.internal.SQLConf;


/**
 * An optimizer rule (installed per session by {@code txnsource.enable_native}) that replaces every batch scan of the
 * Python data source {@code txnlog} by the plan of Spark's own Parquet reader over the same committed snapshot.
 *
 * <p>Contract: the planner (a Python object of the driver, reached through py4j) is called once per scan each time a
 * query is optimized, with the scan's options (one JSON object: a map would cost a round trip per entry), output schema
 * (JSON) and Python data source instance as Spark pickled it when the DataFrame was created (the instance every scan of
 * the data source unpickles, which pins the DataFrame's snapshot; null when it cannot be had); it returns a classic
 * {@code Dataset} whose columns have the scan's names and types in the scan's order, a {@code String} (an error: the
 * read must not fall back), or null (keep the Python data source). The replacement is a projection that gives every
 * column of the Dataset the expression id of the scan's column, so everything above the scan reads it unchanged. A scan
 * is never replaced while Spark's Python filter pushdown is on: filters the data source took over are no longer in the
 * plan.
 *
 * <p>A micro-batch scan of a streaming query ({@code StreamingDataSourceV2ScanRelation} of the data source's Python
 * stream, with the batch's start and end offsets) is replaced likewise: {@code planStream} gets the options, schema and
 * the two offsets as the stream reader's JSON and returns the Dataset of exactly that offset range, or null (the
 * stream reader reads it). Every leaf of the replacement is marked streaming and tied to the query's stream (as
 * Spark's file stream source marks its relations), so stateful operators above stay stateful and the progress
 * reports count the rows against the source (the rows the batch's files hold: a file read in part counts whole); a
 * leaf of another kind keeps the stream reader's scan. Python filter pushdown on keeps it too, as for batch scans.
 */
public class NativeReadRule extends Rule<LogicalPlan> {
    /** Plans a native read: see the class comment. */
    public interface Planner {
        Object plan(String optionsJson, String schemaJson, byte[] source);

        /**
         * The Dataset of the micro-batch from {@code startJson} to {@code endJson}; when it cannot be had, null
         * (the Python stream reads it) or, with {@code strict} (a {@link TxnlogStream}: nothing else can read it),
         * the reason as a {@code String}.
         */
        Object planStream(String optionsJson, String schemaJson, String startJson, String endJson, boolean strict);

        /** Null when the native scan can read every micro-batch of a stream with these options, else why not. */
        String streamable(String optionsJson, String schemaJson);

        /** The {@link StreamCalls} of a new query with these options and schema (a py4j proxy). */
        Object openStream(String optionsJson, String schemaJson);
    }

    /** The Spark configuration under which the data source receives filters (and the plan no longer has them). */
    public static final String PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled";

    private final Planner planner;
    private final String format;

    public NativeReadRule(Planner planner, String format) {
        this.planner = planner;
        this.format = format;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        LogicalPlan replaced = replace(plan);
        if (replaced != null) {
            return replaced;
        }
        return (LogicalPlan) plan.mapChildren(child -> apply((LogicalPlan) child));
    }

    private LogicalPlan replace(LogicalPlan plan) {
        if (plan instanceof StreamingDataSourceV2ScanRelation) {
            return replaceStream((StreamingDataSourceV2ScanRelation) plan);
        }
        if (!(plan instanceof DataSourceV2ScanRelation)) {
            return null;
        }
        DataSourceV2ScanRelation scan = (DataSourceV2ScanRelation) plan;
        DataSourceV2Relation relation = scan.relation();
        if (!relation.table().getClass().getName().endsWith(".PythonTable")
                || !format.equalsIgnoreCase(relation.table().name())
                || pushdown()) {
            return null;
        }
        Map<String, String> options = new HashMap<>(relation.options().asCaseSensitiveMap());
        Object got = planner.plan(Options.toJson(options), scan.schema().json(), pickled(relation));
        if (got instanceof String) {
            throw new IllegalArgumentException((String) got);
        }
        if (!(got instanceof org.apache.spark.sql.classic.Dataset)) {
            return null;
        }
        LogicalPlan child = ((org.apache.spark.sql.classic.Dataset<?>) got).queryExecution().optimizedPlan();
        return ExtensionReadRule.project(scan.output(), child);
    }

    private static boolean pushdown() {
        return "true".equalsIgnoreCase(SQLConf.get().getConfString(PUSHDOWN_CONF, "false").trim());
    }

    private LogicalPlan replaceStream(StreamingDataSourceV2ScanRelation scan) {
        boolean ours = scan.stream() instanceof TxnlogStream.Stream;  // no filter is pushed into it
        return pushdown() && !ours ? null : replaceStream(scan, planner, format);
    }

    /**
     * The native plan of the micro-batch scan {@code scan} of a txnlog stream (the Python stream or
     * {@link TxnlogStream}), asked of {@code planner}; null when {@code scan} is of another source, or the Python
     * stream keeps it.
     *
     * @throws IllegalStateException when a {@link TxnlogStream} micro-batch cannot be read natively (why)
     */
    static LogicalPlan replaceStream(StreamingDataSourceV2ScanRelation scan, Planner planner, String format) {
        Table table = scan.relation().table();
        boolean ours = scan.stream() instanceof TxnlogStream.Stream;
        if (scan.startOffset().isEmpty() || scan.endOffset().isEmpty() || !format.equalsIgnoreCase(table.name())
                || !(ours || table.getClass().getName().endsWith(".PythonTable")
                    && scan.stream().getClass().getName().contains(".PythonMicroBatchStream"))) {
            return null;
        }
        Map<String, String> options = new HashMap<>(scan.relation().options().asCaseSensitiveMap());
        Object got = planner.planStream(Options.toJson(options), scan.schema().json(),
                scan.startOffset().get().json(), scan.endOffset().get().json(), ours);
        LogicalPlan child = got instanceof org.apache.spark.sql.classic.Dataset
                ? streaming(((org.apache.spark.sql.classic.Dataset<?>) got).queryExecution().optimizedPlan(),
                        scan.stream()) : null;
        LogicalPlan out = child == null ? null : ExtensionReadRule.project(scan.output(), child);
        if (out == null && ours) {
            throw new IllegalStateException("txnlog: a micro-batch from " + scan.startOffset().get().json() + " to "
                    + scan.endOffset().get().json() + " cannot be read by Spark's Parquet scan: "
                    + (got instanceof String ? got : "its plan does not match the stream's columns")
                    + "; restart the query with option readPath = python");
        }
        return out;
    }

    /** {@code plan} with each leaf marked streaming and tied to {@code stream}, or null for a leaf of another kind. */
    static LogicalPlan streaming(LogicalPlan plan, SparkDataStream stream) {
        if (plan instanceof LogicalRelation) {
            LogicalRelation r = (LogicalRelation) plan;
            return r.copy(r.relation(), r.output(), r.catalogTable(), true, scala.Option.apply(stream));
        }
        if (plan instanceof LocalRelation) {
            LocalRelation r = (LocalRelation) plan;
            return r.copy(r.output(), r.data(), true, scala.Option.apply(stream));
        }
        if (plan.children().isEmpty()) {
            return null;
        }
        boolean[] refused = {false};
        LogicalPlan out = (LogicalPlan) plan.mapChildren(child -> {
            LogicalPlan marked = streaming((LogicalPlan) child, stream);
            refused[0] |= marked == null;
            return marked == null ? child : marked;
        });
        return refused[0] ? null : out;
    }

    /**
     * The relation's Python data source instance as Spark pickled it: the one its {@code PythonDataSourceV2} created
     * (at {@code load()}, or, with a user-given schema, at the first plan) and every scan of it unpickles. Null when
     * this Spark keeps it elsewhere, or creating it fails (the data source then reports the error).
     */
    static byte[] pickled(DataSourceV2Relation relation) {
        Table table = relation.table();
        try {
            java.lang.reflect.Field field = table.getClass().getDeclaredField("ds");
            field.setAccessible(true);
            Object ds = field.get(table);
            if (!(ds instanceof PythonDataSourceV2)) {
                return null;
            }
            return ((PythonDataSourceV2) ds).getOrCreateDataSourceInPython(table.name(), relation.options(),
                    scala.Option.apply(table.schema())).dataSource();
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }
}

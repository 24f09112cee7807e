package io.txnlog.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The stream rule of {@link TxnlogSparkSessionExtension}, a resolution rule: gives every
 * {@code readStream.format("txnlog")} relation the JVM stream {@link TxnlogStream} in place of the Python data
 * source's, so a query starts no Python process of its own and each micro-batch is read by Spark's Parquet scan.
 *
 * <p>Contract: a relation is taken only when txnlog's planner ({@link PythonSide}) says the native scan can read the
 * query ({@link NativeReadRule.Planner#streamable}: not {@code readPath = python}, no option only the Python reader
 * honours, a store Spark's file system reaches); otherwise, or when the planner cannot be had, the relation keeps
 * the Python stream, which reads as it always does (the relation is then given {@code readPath = python}, so later
 * analyses do not ask again). Only the relation's table (or that option) changes: its output and source stay, so the
 * query, its checkpoint and its progress reports name the same source.
 */
final class StreamResolutionRule extends Rule<LogicalPlan> {
    private final SparkSession session;
    private final String format;

    StreamResolutionRule(SparkSession session, String format) {
        this.session = session;
        this.format = format;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!plan.isStreaming()) {
            return plan;
        }
        if (plan instanceof StreamingRelationV2) {
            LogicalPlan replaced = replace((StreamingRelationV2) plan);
            return replaced != null ? replaced : plan;
        }
        return (LogicalPlan) plan.mapChildren(child -> apply((LogicalPlan) child));
    }

    private LogicalPlan replace(StreamingRelationV2 relation) {
        Table table = relation.table();
        if (!table.getClass().getName().endsWith(".PythonTable") || !format.equalsIgnoreCase(table.name())) {
            return null;
        }
        Map<String, String> options = new HashMap<>(relation.extraOptions().asCaseSensitiveMap());
        if ("python".equals(ExtensionReadRule.readPath(options))) {
            return null;
        }
        String why;
        try {
            why = PythonSide.planner(session).streamable(Options.toJson(options), relation.schema().json());
        } catch (PythonSide.Unavailable e) {
            return null;
        }
        if (why != null) {
            return leftToPythonStream(relation, options);
        }
        Map<String, Object> changes = new HashMap<>();
        changes.put("table", new TxnlogStream.StreamTable(table, session));
        return NativeWriteRule.copy(relation, changes);
    }

    /** The relation with {@code readPath = python}: later analyses leave it to the Python stream without asking. */
    private static LogicalPlan leftToPythonStream(StreamingRelationV2 relation, Map<String, String> options) {
        options.keySet().removeIf(k -> k.equalsIgnoreCase(ExtensionReadRule.READ_PATH));
        options.put(ExtensionReadRule.READ_PATH, "python");
        Map<String, Object> changes = new HashMap<>();
        changes.put("extraOptions", new CaseInsensitiveStringMap(options));
        LogicalPlan copy = NativeWriteRule.copy(relation, changes);
        return copy != null ? copy : relation;
    }
}

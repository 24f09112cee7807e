package io.txnlog.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.StreamingDataSourceV2ScanRelation;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The read rule of {@link TxnlogSparkSessionExtension}: replaces every batch relation of the Python data source
 * {@code txnlog} by the plan of Spark's own Parquet reader over the same committed snapshot, as
 * {@link NativeReadRule} does, with the same planner contract ({@link NativeReadRule.Planner}, reached through
 * {@link PythonSide}).
 *
 * <p>It runs among the operator optimizations, before Spark plans the data source's scan, so it replaces the
 * relation (no filter was pushed into the data source yet) and the optimizer then prunes columns and pushes
 * filters into the Parquet scan. A relation the planner leaves to the data source gets the option
 * {@code readPath = python}, so the optimizer's later passes do not ask again (each asking takes a snapshot). The
 * rule stands aside in a session where {@code txnsource.enable_native} installed its own rule.
 *
 * <p>It also replaces each micro-batch scan of {@link TxnlogStream} (the stream {@link StreamResolutionRule} gives
 * {@code readStream.format("txnlog")} queries) by the native scan of the batch's offset range, as
 * {@link NativeReadRule} does; the Python stream's micro-batches stay with its reader under the extension alone.
 */
final class ExtensionReadRule extends Rule<LogicalPlan> {
    static final String READ_PATH = "readPath";

    private final SparkSession session;
    private final String format;

    ExtensionReadRule(SparkSession session, String format) {
        this.session = session;
        this.format = format;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (PythonSide.sessionHasRule(session, NativeReadRule.class)) {
            return plan;
        }
        return rewrite(plan);
    }

    private LogicalPlan rewrite(LogicalPlan plan) {
        if (plan instanceof StreamingDataSourceV2ScanRelation) {
            StreamingDataSourceV2ScanRelation scan = (StreamingDataSourceV2ScanRelation) plan;
            if (!(scan.stream() instanceof TxnlogStream.Stream)) {
                return plan;  // the Python stream's micro-batches stay with its reader under the extension
            }
            return NativeReadRule.replaceStream(scan, PythonSide.planner(session), format);
        }
        if (plan instanceof DataSourceV2Relation) {
            LogicalPlan replaced = replace((DataSourceV2Relation) plan);
            return replaced != null ? replaced : plan;
        }
        return (LogicalPlan) plan.mapChildren(child -> rewrite((LogicalPlan) child));
    }

    private LogicalPlan replace(DataSourceV2Relation relation) {
        if (!relation.table().getClass().getName().endsWith(".PythonTable")
                || !format.equalsIgnoreCase(relation.table().name())) {
            return null;
        }
        Map<String, String> options = new HashMap<>(relation.options().asCaseSensitiveMap());
        String mode = readPath(options);
        if ("python".equals(mode)) {
            return null;
        }
        Object got;
        try {
            got = PythonSide.planner(session).plan(Options.toJson(options), relation.schema().json(),
                    NativeReadRule.pickled(relation));
        } catch (PythonSide.Unavailable e) {
            if ("native".equals(mode)) {
                throw new IllegalArgumentException(
                        "txnlog: option 'readPath' = 'native' cannot read this: " + e.getMessage(), e);
            }
            got = null;
        }
        if (got instanceof String) {
            throw new IllegalArgumentException((String) got);
        }
        LogicalPlan child = got instanceof org.apache.spark.sql.classic.Dataset
                ? ((org.apache.spark.sql.classic.Dataset<?>) got).queryExecution().optimizedPlan() : null;
        LogicalPlan project = child == null ? null : project(relation.output(), child);
        return project != null ? project : leftToDataSource(relation, options);
    }

    /** The relation with {@code readPath = python}: later passes leave it to the data source without asking. */
    private static LogicalPlan leftToDataSource(DataSourceV2Relation relation, Map<String, String> options) {
        options.keySet().removeIf(k -> k.equalsIgnoreCase(READ_PATH));
        options.put(READ_PATH, "python");
        Map<String, Object> changes = new HashMap<>();
        changes.put("options", new CaseInsensitiveStringMap(options));
        LogicalPlan copy = NativeWriteRule.copy(relation, changes);
        return copy != null ? copy : relation;
    }

    /** The option {@code readPath} of {@code options}, trimmed and lower case; {@code auto} when not given. */
    static String readPath(Map<String, String> options) {
        for (Map.Entry<String, String> e : options.entrySet()) {
            if (e.getKey().equalsIgnoreCase(READ_PATH)) {
                return e.getValue().trim().toLowerCase(Locale.ROOT);
            }
        }
        return "auto";
    }

    /**
     * {@code child} under a projection giving each of its columns the expression id of the matching column of
     * {@code want}; null when names, types or nullability do not match (the data source then reads).
     */
    static LogicalPlan project(scala.collection.Seq<? extends Attribute> want, LogicalPlan child) {
        List<Attribute> wanted = new ArrayList<Attribute>(CollectionConverters.asJava(want));
        List<Attribute> have = new ArrayList<>(CollectionConverters.asJava(child.output()));
        if (wanted.size() != have.size()) {
            return null;
        }
        List<NamedExpression> columns = new ArrayList<>();
        for (int i = 0; i < wanted.size(); i++) {
            Attribute w = wanted.get(i);
            Attribute h = have.get(i);
            if (!w.name().equals(h.name()) || !w.dataType().sameType(h.dataType()) || (h.nullable() && !w.nullable())) {
                return null;
            }
            columns.add(new Alias(h, w.name(), w.exprId(),
                    CollectionConverters.asScala(new ArrayList<String>()).toSeq(), scala.Option.empty(),
                    CollectionConverters.asScala(new ArrayList<String>()).toSeq()));
        }
        return new Project(CollectionConverters.asScala(columns).toSeq(), child);
    }
}

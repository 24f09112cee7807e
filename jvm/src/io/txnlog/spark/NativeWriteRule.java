package io.txnlog.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.plans.logical.AppendData;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.V1Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.sources.InsertableRelation;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * An optimizer rule (installed per session by {@code txnsink.enable_native}) that hands every batch append of the
 * Python data source {@code txnlog} ({@code df.write.format("txnlog").mode("append").save()}) to the native write
 * path, where Spark's own Parquet writer writes the segments and one txnlog transaction publishes them.
 *
 * <p>Contract: the writer (a Python object of the driver, reached through py4j) is asked once per append each time the
 * write is optimized, with the write's options (the data source's and the writer's, merged; a JSON object of strings)
 * and the rows' schema (JSON); it answers {@code Boolean.TRUE} (the native path writes), a {@code String} (an error:
 * the write must not fall back) or anything else (keep the Python data source). For {@code TRUE}, the append's table
 * becomes a table whose only write is a V1 write: when the command runs, Spark passes the rows (a classic
 * {@code Dataset} of the analyzed query) to {@link Writer#insert}, which writes and commits them before returning (or
 * falls back to the data source itself, which this rule then leaves alone: the writer's answer for that write is not
 * {@code TRUE}). The rule changes nothing else in the plan and nothing when the Spark version's plan nodes have other
 * fields.
 *
 * <p>Streaming: a micro-batch of a {@code writeStream.format(<format>)} query reaches the rule as Spark's
 * {@code WriteToDataSourceV2} over a {@code MicroBatchWrite} of the Python data source's streaming write; the writer
 * is asked {@link Writer#planStream} with the stream's options, and for {@code TRUE} the node becomes a
 * {@link StreamInsert} over the same query, whose rows go to {@link Writer#insertStream} with the query id and batch
 * id (a {@code String} answer fails the query's optimization with it; anything else keeps Spark's write).
 */
public class NativeWriteRule extends Rule<LogicalPlan> {
    /** Plans and runs a native write: see the class comment. */
    public interface Writer {
        Object plan(String optionsJson, String schemaJson);

        void insert(Object dataset, String optionsJson);

        Object planStream(String optionsJson, String schemaJson);

        void insertStream(Object dataset, String optionsJson, String queryId, long batchId);
    }

    private final Writer writer;
    private final String format;

    public NativeWriteRule(Writer writer, String format) {
        this.writer = writer;
        this.format = format;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (plan instanceof AppendData) {
            LogicalPlan replaced = replace((AppendData) plan);
            return replaced != null ? replaced : plan;
        }
        if ("WriteToDataSourceV2".equals(plan.getClass().getSimpleName())) {
            LogicalPlan replaced = replaceMicroBatch(plan);
            return replaced != null ? replaced : plan;
        }
        return (LogicalPlan) plan.mapChildren(child -> apply((LogicalPlan) child));
    }

    private LogicalPlan replace(AppendData append) {
        if (!(append.table() instanceof DataSourceV2Relation)) {
            return null;
        }
        DataSourceV2Relation relation = (DataSourceV2Relation) append.table();
        Table table = relation.table();
        if (!table.getClass().getName().endsWith(".PythonTable") || !format.equalsIgnoreCase(table.name())) {
            return null;
        }
        Map<String, String> options = new HashMap<>(relation.options().asCaseSensitiveMap());
        options.putAll(CollectionConverters.asJava(append.writeOptions()));
        Object got = writer.plan(Options.toJson(options), append.query().schema().json());
        if (got instanceof String) {
            throw new IllegalArgumentException((String) got);
        }
        if (!Boolean.TRUE.equals(got)) {
            return null;
        }
        NativeTable nativeTable = new NativeTable(table, writer, options);
        Map<String, Object> relationArgs = new HashMap<>();
        relationArgs.put("table", nativeTable);
        LogicalPlan newRelation = copy(relation, relationArgs);
        if (newRelation == null) {
            return null;
        }
        Map<String, Object> appendArgs = new HashMap<>();
        appendArgs.put("table", newRelation);
        appendArgs.put("write", scala.Option.apply(nativeTable.write));
        appendArgs.put("analyzedQuery", scala.Option.apply(append.query()));
        return copy(append, appendArgs);
    }

    /**
     * The micro-batch write of a {@code writeStream.format(<format>)} query ({@code WriteToDataSourceV2} over a
     * {@code MicroBatchWrite} of the Python data source's streaming write, as Spark's {@code V2Writes} builds it)
     * as a {@link StreamInsert}, when the writer takes it; null to keep it (another write, a Spark whose classes
     * have other fields, {@code outputMode("complete")}, or the writer's answer is not {@code TRUE}).
     */
    LogicalPlan replaceMicroBatch(LogicalPlan node) {
        Object batchWrite = element(node, "batchWrite");
        Object query = element(node, "query");
        if (batchWrite == null || !(query instanceof LogicalPlan)
                || !"MicroBatchWrite".equals(batchWrite.getClass().getSimpleName())) {
            return null;
        }
        Object streaming;
        String shortName;
        LogicalWriteInfo info;
        try {
            streaming = batchWrite.getClass().getMethod("writeSupport").invoke(batchWrite);
            if (streaming == null || !streaming.getClass().getSimpleName().equals("PythonStreamingWrite")) {
                return null;
            }
            shortName = (String) field(streaming, "shortName");
            info = (LogicalWriteInfo) field(streaming, "info");
            if (Boolean.TRUE.equals(field(streaming, "isTruncate"))) {
                return null;
            }
        } catch (ReflectiveOperationException | ClassCastException e) {
            return null;
        }
        if (!format.equalsIgnoreCase(shortName) || info == null) {
            return null;
        }
        String options = Options.toJson(new HashMap<>(info.options().asCaseSensitiveMap()));
        Object got = writer.planStream(options, ((LogicalPlan) query).schema().json());
        if (got instanceof String) {
            throw new IllegalArgumentException((String) got);
        }
        if (!Boolean.TRUE.equals(got)) {
            return null;
        }
        return new StreamInsert((LogicalPlan) query, new StreamInsert.Target(writer, options));
    }

    private static Object element(LogicalPlan node, String name) {
        for (int i = 0; i < node.productArity(); i++) {
            if (name.equals(node.productElementName(i))) {
                return node.productElement(i);
            }
        }
        return null;
    }

    private static Object field(Object target, String name) throws ReflectiveOperationException {
        java.lang.reflect.Field f = target.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(target);
    }

    /** {@code node} with the named constructor fields replaced, or null when a name is not a field of it. */
    static LogicalPlan copy(LogicalPlan node, Map<String, Object> changes) {
        int arity = node.productArity();
        Object[] args = new Object[arity];
        int found = 0;
        for (int i = 0; i < arity; i++) {
            String name = node.productElementName(i);
            if (changes.containsKey(name)) {
                args[i] = changes.get(name);
                found++;
            } else {
                args[i] = node.productElement(i);
            }
        }
        if (found != changes.size()) {
            return null;
        }
        return (LogicalPlan) node.makeCopy(args);
    }

    /** The txnlog table, written only through {@link Insert} (Spark's V1 fallback write). */
    static final class NativeTable implements SupportsWrite {
        private final Table delegate;
        final Insert write;

        NativeTable(Table delegate, Writer writer, Map<String, String> options) {
            this.delegate = delegate;
            this.write = new Insert(writer, options);
        }

        @Override
        public String name() {
            return delegate.name();
        }

        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return delegate.schema();
        }

        @Override
        public Column[] columns() {
            return delegate.columns();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.V1_BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return new WriteBuilder() {
                @Override
                public V1Write build() {
                    return write;
                }
            };
        }

        @Override
        public String toString() {
            return "txnlog (native write)";
        }
    }

    /** The V1 write: the rows go to the Python writer, which writes and commits them. */
    static final class Insert implements V1Write, InsertableRelation {
        private final Writer writer;
        private final Map<String, String> options;

        Insert(Writer writer, Map<String, String> options) {
            this.writer = writer;
            this.options = options;
        }

        @Override
        public InsertableRelation toInsertableRelation() {
            return this;
        }

        @Override
        public void insert(Dataset<Row> data, boolean overwrite) {
            if (overwrite) {
                throw new IllegalArgumentException("a txnlog topic is an append-only log: use mode('append')");
            }
            writer.insert(data, Options.toJson(options));
        }

        @Override
        public String description() {
            return "txnlog native write";
        }
    }
}

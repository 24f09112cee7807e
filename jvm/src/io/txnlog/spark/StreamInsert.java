package io.txnlog.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.TreePattern;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.command.DataWritingCommand;
import org.apache.spark.sql.execution.metric.SQLMetric;

import scala.jdk.javaapi.CollectionConverters;

/**
 * A micro-batch of a {@code writeStream.format("txnlog")} query written by the native write path: what
 * {@link NativeWriteRule} puts in place of Spark's micro-batch write ({@code WriteToDataSourceV2} over the Python
 * data source's streaming write).
 *
 * <p>Contract: a command over the micro-batch's query, planned by Spark as any data-writing command (its child
 * planned by the streaming query's own incremental execution, so stateful operators keep their state). When it
 * runs, it hands the writer ({@link NativeWriteRule.Writer#insertStream}) a batch {@code Dataset} over the rows of
 * the executed child (not a streaming plan: the Python side writes it as any batch DataFrame), with the write's
 * options and the query id and batch id Spark set on this thread, and returns once the writer has written and
 * committed them (or failed: the micro-batch then fails).
 */
public final class StreamInsert extends LogicalPlan implements DataWritingCommand {
    private static final long serialVersionUID = 1L;
    /** Spark's local property naming the streaming query of the running micro-batch. */
    static final String QUERY_ID = "sql.streaming.queryId";
    /** Spark's local property naming the running micro-batch. */
    static final String BATCH_ID = "streaming.sql.batchId";

    /** What the command writes with, besides its rows. */
    public static final class Target implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final transient NativeWriteRule.Writer writer;
        final String optionsJson;

        Target(NativeWriteRule.Writer writer, String optionsJson) {
            this.writer = writer;
            this.optionsJson = optionsJson;
        }
    }

    private final LogicalPlan query;
    private final Target target;

    public StreamInsert(LogicalPlan query, Target target) {
        this.query = query;
        this.target = target;
    }

    @Override
    public LogicalPlan query() {
        return query;
    }

    @Override
    public LogicalPlan child() {
        return query;
    }

    @Override
    public scala.collection.immutable.Seq<LogicalPlan> children() {
        List<LogicalPlan> one = new ArrayList<>();
        one.add(query);
        return CollectionConverters.asScala(one).toList();
    }

    @Override
    public LogicalPlan withNewChildInternal(LogicalPlan newChild) {
        return new StreamInsert(newChild, target);
    }

    @Override
    public LogicalPlan withNewChildrenInternal(scala.collection.immutable.IndexedSeq<LogicalPlan> newChildren) {
        return new StreamInsert(newChildren.apply(0), target);
    }

    @Override
    public scala.collection.immutable.Seq<String> outputColumnNames() {
        List<String> names = new ArrayList<>();
        for (Attribute a : CollectionConverters.asJava(query.output())) {
            names.add(a.name());
        }
        return CollectionConverters.asScala(names).toList();
    }

    @Override
    public scala.collection.immutable.Seq<Attribute> output() {
        return scala.collection.immutable.List$.MODULE$.empty();
    }

    @Override
    public void org$apache$spark$sql$catalyst$plans$logical$Command$_setter_$nodePatterns_$eq(
            scala.collection.immutable.Seq<scala.Enumeration.Value> patterns) {
        // Command's pattern list is a field of Scala classes; this class answers it in nodePatterns()
    }

    @Override
    public scala.collection.immutable.Seq<scala.Enumeration.Value> nodePatterns() {
        List<scala.Enumeration.Value> one = new ArrayList<>();
        one.add(TreePattern.COMMAND());
        return CollectionConverters.asScala(one).toList();
    }

    @Override
    public scala.collection.immutable.Map<String, SQLMetric> metrics() {
        return scala.collection.immutable.Map$.MODULE$.empty();
    }

    @Override
    public scala.collection.immutable.Seq<Row> run(SparkSession session, SparkPlan child) {
        String queryId = session.sparkContext().getLocalProperty(QUERY_ID);
        String batchId = session.sparkContext().getLocalProperty(BATCH_ID);
        if (queryId == null || batchId == null) {
            throw new IllegalStateException("txnlog: the native streaming write runs only inside a micro-batch "
                    + "(Spark set no " + QUERY_ID + " / " + BATCH_ID + " on this thread)");
        }
        RDD<InternalRow> rows = child.execute();
        Dataset<Row> batch = session.internalCreateDataFrame(rows, query.schema(), false);
        target.writer.insertStream(batch, target.optionsJson, queryId, Long.parseLong(batchId));
        return scala.collection.immutable.List$.MODULE$.empty();
    }

    @Override
    public int productArity() {
        return 1;
    }

    @Override
    public Object productElement(int n) {
        if (n != 0) {
            throw new IndexOutOfBoundsException(String.valueOf(n));
        }
        return query;
    }

    @Override
    public scala.collection.immutable.Seq<Object> otherCopyArgs() {
        List<Object> more = new ArrayList<>();
        more.add(target);
        return CollectionConverters.asScala(more).toList();
    }

    @Override
    public boolean canEqual(Object that) {
        return that instanceof StreamInsert;
    }

    @Override
    public boolean equals(Object that) {
        return that instanceof StreamInsert && ((StreamInsert) that).query.equals(query)
                && ((StreamInsert) that).target == target;
    }

    @Override
    public int hashCode() {
        return query.hashCode();
    }

    @Override
    public String nodeName() {
        return "TxnlogNativeStreamWrite";
    }
}

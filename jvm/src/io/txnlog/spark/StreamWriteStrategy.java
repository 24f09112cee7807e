package io.txnlog.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.command.DataWritingCommandExec;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The streaming write of {@link TxnlogSparkSessionExtension}, a planner strategy: plans each micro-batch of a
 * {@code writeStream.format("txnlog")} query as the native write ({@link StreamInsert}) where the native path takes
 * it, exactly as {@link NativeWriteRule} does for a session with {@code txnsink.enable_native}.
 *
 * <p>Why a strategy: Spark builds a micro-batch's write ({@code WriteToDataSourceV2} over a {@code MicroBatchWrite})
 * in its optimizer's "Early Filter and Projection Push-Down" batch, after every batch an extension's optimizer rule
 * can join, so only {@code enable_native}'s rule (among the optimizer's last, user-provided rules) sees it there.
 * Extension strategies come before Spark's own, so this one sees the write node first.
 *
 * <p>Contract: for a {@code WriteToDataSourceV2} the writer takes ({@link NativeWriteRule#replaceMicroBatch}), the
 * plan is Spark's own plan of the resulting data-writing command ({@code DataWritingCommandExec} over the query,
 * planned by the other strategies); for anything else, no plan (Spark's strategies plan it). In a session where
 * {@code enable_native}'s rule acts, the writer declines and that rule has already replaced the write.
 */
final class StreamWriteStrategy extends SparkStrategy {
    private final NativeWriteRule rule;

    StreamWriteStrategy(SparkSession session, String format) {
        this.rule = new NativeWriteRule(new PythonSide.SessionWriter(session), format);
    }

    @Override
    public scala.collection.immutable.Seq<SparkPlan> apply(LogicalPlan plan) {
        List<SparkPlan> out = new ArrayList<>();
        if ("WriteToDataSourceV2".equals(plan.getClass().getSimpleName())) {
            LogicalPlan insert = rule.replaceMicroBatch(plan);
            if (insert instanceof StreamInsert) {
                StreamInsert command = (StreamInsert) insert;
                out.add(new DataWritingCommandExec(command, planLater(command.query())));
            }
        }
        return CollectionConverters.asScala(out).toList();
    }
}

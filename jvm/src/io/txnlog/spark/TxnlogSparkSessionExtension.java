package io.txnlog.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.SparkStrategy;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * txnlog's session extension ({@code spark.sql.extensions=io.txnlog.spark.TxnlogSparkSessionExtension}, this jar
 * on Spark's class path): every session of the Spark application reads {@code format("txnlog")} batch scans with
 * Spark's own Parquet reader and writes its batch appends and the micro-batches of its
 * {@code writeStream.format("txnlog")} queries with Spark's own Parquet writer wherever the native paths apply, with
 * no call in the session ({@code txnsource.enable_native} and {@code txnsink.enable_native} install the same
 * behaviour in one classic session). It works wherever the extension is configured: a classic driver, a
 * {@code local-cluster} or cluster driver, a Spark Connect server.
 *
 * <p>A resolution rule ({@link StreamResolutionRule}) gives {@code readStream.format("txnlog")} relations the JVM
 * stream {@link TxnlogStream}, so a streaming query starts no Python process of its own.
 *
 * <p>A planner strategy ({@link StreamWriteStrategy}) plans the micro-batches of {@code writeStream.format("txnlog")}
 * queries as native writes ({@link StreamInsert}), as {@code enable_native}'s write rule does.
 *
 * <p>The read and write rules are optimizer rules ({@link SparkSessionExtensions#injectOptimizerRule}): the read rule
 * ({@link ExtensionReadRule}) replaces the data source's relation before Spark plans its scan; the write rule is
 * {@link NativeWriteRule}. Both ask txnlog's Python planner on the driver ({@link PythonSide}): the driver's
 * Python process when {@code enable_native} installed its own rule in the session (that rule then acts and these
 * stand aside), else a Python process this JVM starts on the first txnlog query and keeps for its lifetime.
 */
public class TxnlogSparkSessionExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    /** The data source short name whose scans and appends the rules take. */
    static final String FORMAT = "txnlog";

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new StreamResolutionRule(session, FORMAT);
            }
        });
        extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new ExtensionReadRule(session, FORMAT);
            }
        });
        extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new NativeWriteRule(new PythonSide.SessionWriter(session), FORMAT);
            }
        });
        extensions.injectPlannerStrategy(new AbstractFunction1<SparkSession, SparkStrategy>() {
            @Override
            public SparkStrategy apply(SparkSession session) {
                return new StreamWriteStrategy(session, FORMAT);
            }
        });
        return BoxedUnit.UNIT;
    }
}

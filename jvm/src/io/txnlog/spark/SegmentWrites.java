package io.txnlog.spark;

import org.apache.spark.sql.DataFrameWriter;

/**
 * Runs a {@link SegmentParquetFormat} write for a driver that loaded this jar at run time (in a class loader of its
 * own, which Spark's executors and Spark's data source lookup do not see).
 *
 * <p>Contract: {@link #save} adds the jar to the Spark context once (so executors load the format's writer
 * classes), then saves the writer's rows with the format, resolving it through this jar's class loader; the
 * thread's context class loader is restored afterwards. Errors are Spark's.
 */
public final class SegmentWrites {
    /** Save {@code writer}'s rows to {@code path} with {@link SegmentParquetFormat} (options already set). */
    public void save(DataFrameWriter<?> writer, String path) {
        Jar.ship();
        Jar.withLoader(() -> {
            writer.format(SegmentParquetFormat.class.getName()).save(path);
            return null;
        });
    }
}

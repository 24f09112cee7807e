package io.txnlog.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's Parquet file format as the native write path writes segments: each file's dictionary encoding chosen per
 * column once, from the file's first rows ({@link DictionaryChoice}), and with a key, each task's rows written into
 * one file per topic partition, without a partition column, a sort or a Python worker.
 *
 * <p>Contract: {@code df.write.format(SegmentParquetFormat.class.getName())} writes each task's rows into the file
 * Spark asked for. With the options {@link #KEY} (the key columns' positions in the rows, comma-separated),
 * {@link #PARTITIONS} (the topic's partition count) and {@link #FOLDER} (the folder name prefix), it instead writes
 * the row whose {@link KeyHash} partition is {@code p} into {@code <FOLDER>=<p>/<name>} beside the file Spark asked
 * for, {@code <name>} being that file's name: the layout {@code partitionBy(FOLDER)} gives, inside the task attempt's
 * folder, so Spark's commit protocol publishes a task's files together or not at all. With {@link #SPREAD} (a
 * non-negative integer {@code r}) instead of {@link #KEY}, the same layout takes the task's rows in turn: its
 * {@code n}-th row (from 0, in the order Spark hands them) goes to partition {@code (r + i + n) mod partitions},
 * {@code i} being the task's partition id, so every task spreads its rows evenly over the partitions, a retried
 * attempt exactly as the first. With {@link #SPREAD_RUN} {@code = k} and {@link #SPREAD_STRIDE} {@code = s} as well,
 * rows go in runs of {@code k}: the {@code n}-th row to partition {@code (r + i * s + floor(n / k)) mod partitions},
 * so a task of at most {@code k} rows writes one file (as Kafka's sticky partitioner fills one partition's batch
 * before it moves on), and tasks start {@code s} partitions apart. A task writes no file for a
 * partition it has no row for (nor, without a key, when it has no row at all). A file's writer opens once its first
 * rows are judged (up to Parquet's first page of rows, buffered as copies); a keyed task hands each partition's
 * writer its rows in runs ({@link PartitionRuns}), each partition's in the task's order. With {@link #DESCRIBE}
 * = {@code true}, each file is synced and described once closed ({@link FileDescription}); a failure there fails
 * the task. {@code path()} names a file the writer wrote (for Spark's task statistics: one file per keyed task).
 * Reading goes through {@link ParquetFileFormat} unchanged. Invalid key options fail the write when it is
 * planned ({@link IllegalArgumentException}).
 */
public class SegmentParquetFormat extends ParquetFileFormat {
    private static final long serialVersionUID = 1L;
    public static final String KEY = "txnlog.key";
    public static final String PARTITIONS = "txnlog.partitions";
    public static final String FOLDER = "txnlog.folder";
    /** Option: unkeyed rows dealt over the partitions in turn, starting from this rotation plus the task's id. */
    public static final String SPREAD = "txnlog.spread";
    /** Option: with {@link #SPREAD}, how many consecutive rows go to one partition before the next (default 1). */
    public static final String SPREAD_RUN = "txnlog.spreadRun";
    /** Option: with {@link #SPREAD}, how many partitions apart two consecutive tasks start (default 1). */
    public static final String SPREAD_STRIDE = "txnlog.spreadStride";
    /** Option: {@code true} has each task describe its closed files ({@link FileDescription}). */
    public static final String DESCRIBE = "txnlog.describe";

    @Override
    public OutputWriterFactory prepareWrite(SparkSession session, Job job,
                                            scala.collection.immutable.Map<String, String> options,
                                            StructType dataSchema) {
        OutputWriterFactory files = super.prepareWrite(session, job, options, dataSchema);
        int sample = DictionaryChoice.sampleRows(job.getConfiguration());
        boolean describe = "true".equals(Options.optional(options, DESCRIBE));
        String spread = Options.optional(options, SPREAD);
        if (Options.optional(options, KEY) == null && spread == null) {
            return new Factory(files, null, 1, null, -1, 1, 1, sample, describe);
        }
        if (spread != null) {
            String folder = Options.required(options, FOLDER, "the spread Parquet write");
            int partitions;
            long rotation;
            long run;
            long stride;
            try {
                partitions = Integer.parseInt(Options.required(options, PARTITIONS, "the spread Parquet write"));
                rotation = Long.parseLong(spread.trim());
                String runText = Options.optional(options, SPREAD_RUN);
                run = runText == null ? 1 : Long.parseLong(runText.trim());
                String strideText = Options.optional(options, SPREAD_STRIDE);
                stride = strideText == null ? 1 : Long.parseLong(strideText.trim());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("txnlog: invalid " + SPREAD + ", " + SPREAD_RUN + ", "
                        + SPREAD_STRIDE + " or " + PARTITIONS + " option", e);
            }
            if (partitions < 1 || rotation < 0 || run < 1 || stride < 1 || folder.isEmpty() || folder.contains("/")) {
                throw new IllegalArgumentException("txnlog: invalid " + SPREAD + ", " + SPREAD_RUN + ", "
                        + SPREAD_STRIDE + ", " + PARTITIONS + " or " + FOLDER + " option");
            }
            return new Factory(files, null, partitions, folder, rotation, run, stride, sample, describe);
        }
        String key = Options.required(options, KEY, "the keyed Parquet write");
        String folder = Options.required(options, FOLDER, "the keyed Parquet write");
        int partitions;
        int[] ordinals;
        try {
            partitions = Integer.parseInt(Options.required(options, PARTITIONS, "the keyed Parquet write"));
            String[] parts = key.split(",");
            ordinals = new int[parts.length];
            for (int i = 0; i < parts.length; i++) {
                ordinals[i] = Integer.parseInt(parts[i].trim());
            }
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("txnlog: invalid " + KEY + " or " + PARTITIONS + " option", e);
        }
        if (folder.isEmpty() || folder.contains("/")) {
            throw new IllegalArgumentException("txnlog: invalid " + FOLDER + " option " + folder);
        }
        return new Factory(files, new KeyHash(dataSchema, ordinals, partitions), partitions, folder, -1, 1, 1,
                sample, describe);
    }

    @Override
    public String toString() {
        return "TxnlogSegmentParquet";
    }

    private static final class Factory extends OutputWriterFactory {
        private static final long serialVersionUID = 1L;
        private final OutputWriterFactory files;
        private final KeyHash hash;
        private final int partitions;
        private final String folder;
        private final long rotation;
        private final long run;
        private final long stride;
        private final int sample;
        private final boolean describe;

        /**
         * {@code hash} and {@code folder} null: one file per task; {@code hash} null and {@code folder} set: rows in
         * turn from {@code rotation} plus {@code stride} times the task's id, {@code run} rows at a time;
         * {@code sample}: rows judged before a file opens (0: none).
         */
        Factory(OutputWriterFactory files, KeyHash hash, int partitions, String folder, long rotation, long run,
                long stride, int sample, boolean describe) {
            this.files = files;
            this.hash = hash;
            this.partitions = partitions;
            this.folder = folder;
            this.rotation = rotation;
            this.run = run;
            this.stride = stride;
            this.sample = sample;
            this.describe = describe;
        }

        @Override
        public String getFileExtension(TaskAttemptContext context) {
            return files.getFileExtension(context);
        }

        @Override
        public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
            return new Writer(this, path, dataSchema, context);
        }
    }

    /** Routes each row to its partition's file, opened at the partition's first row once the first rows are judged. */
    private static final class Writer extends OutputWriter {
        private final Factory factory;
        private final String path;
        private final String dir;
        private final String name;
        private final StructType schema;
        private TaskAttemptContext context;
        private final OutputWriter[] writers;
        private final String[] files;
        private final long[] rows;
        private List<InternalRow> sample;
        private long sampleBytes;
        private final PartitionRuns runs;
        /** The partition the next unkeyed row goes to (spread writes). */
        private int next;
        /** Rows given to {@link #next} in its current run (spread writes). */
        private long inRun;

        Writer(Factory factory, String path, StructType schema, TaskAttemptContext context) {
            this.factory = factory;
            this.path = path;
            int slash = path.lastIndexOf('/');
            this.dir = path.substring(0, slash);
            this.name = path.substring(slash + 1);
            this.schema = schema;
            this.context = context;
            this.writers = new OutputWriter[factory.partitions];
            this.files = new String[factory.partitions];
            this.rows = new long[factory.partitions];
            this.sample = factory.sample > 0 ? new ArrayList<>() : null;
            // rows dealt one by one are gathered in runs per partition; long runs are written as they come
            this.runs = factory.folder == null || factory.partitions == 1 || (factory.hash == null && factory.run > 1)
                    ? null
                    : new PartitionRuns(factory.partitions, schema.length());
            TaskContext task = TaskContext.get();
            long id = task == null ? 0 : task.partitionId();
            this.next = factory.hash != null || factory.folder == null ? 0
                    : (int) Math.floorMod(factory.rotation + id * factory.stride, (long) factory.partitions);
        }

        /** The row's partition: by the key's hash, or, spreading, the next in turn. */
        private int place(InternalRow row) {
            if (factory.hash != null) {
                return factory.hash.partition(row);
            }
            int p = next;
            if (++inRun == factory.run) {
                inRun = 0;
                next = p + 1 == factory.partitions ? 0 : p + 1;
            }
            return p;
        }

        @Override
        public void write(InternalRow row) {
            if (sample != null) {
                InternalRow copy = row.copy();
                sample.add(copy);
                sampleBytes += copy instanceof UnsafeRow ? ((UnsafeRow) copy).getSizeInBytes() : 64;
                if (sample.size() >= factory.sample || sampleBytes >= DictionaryChoice.SAMPLE_BYTES) {
                    judge();
                }
                return;
            }
            route(row);
        }

        /** Choose the files' dictionaries from the buffered rows, then write them. */
        private void judge() {
            List<InternalRow> first = sample;
            sample = null;
            if (first.isEmpty()) {
                return;
            }
            context = DictionaryChoice.context(context, schema, first);
            for (InternalRow r : first) {
                route(r);
            }
        }

        private void route(InternalRow row) {
            if (runs == null) {
                put(factory.folder == null ? 0 : place(row), row);
                return;
            }
            int p = place(row);
            if (!(row instanceof UnsafeRow)) {
                if (runs.holds(p)) {
                    runs.drain(p, r -> put(p, r));
                }
                put(p, row);
            } else if (runs.add(p, (UnsafeRow) row)) {
                runs.drain(p, r -> put(p, r));
            }
        }

        private void put(int p, InternalRow row) {
            OutputWriter w = writers[p];
            if (w == null) {
                String file = factory.folder == null ? path : dir + "/" + factory.folder + "=" + p + "/" + name;
                w = factory.files.newInstance(file, schema, context);
                writers[p] = w;
                files[p] = file;
            }
            w.write(row);
            rows[p]++;
        }

        @Override
        public void close() {
            RuntimeException first = null;
            try {
                if (sample != null) {
                    judge();
                }
                for (int p = 0; runs != null && p < writers.length; p++) {
                    if (runs.holds(p)) {
                        final int q = p;
                        runs.drain(p, r -> put(q, r));
                    }
                }
            } catch (RuntimeException e) {
                first = e;  // the files opened so far are still closed
            }
            for (int p = 0; p < writers.length; p++) {
                if (writers[p] == null) {
                    continue;
                }
                try {
                    writers[p].close();
                    if (factory.describe && first == null) {
                        FileDescription.write(files[p], rows[p], context.getConfiguration());
                    }
                } catch (RuntimeException e) {
                    if (first == null) {
                        first = e;
                    } else {
                        first.addSuppressed(e);
                    }
                }
                writers[p] = null;
            }
            if (first != null) {
                throw first;
            }
        }

        /**
         * The file Spark asked for, or with a key the first file this writer opened: Spark's task statistics look
         * for the file this names once the writer is closed, so a keyed task counts one file instead of warning
         * that the file it asked for was never written.
         */
        @Override
        public String path() {
            for (String file : files) {
                if (file != null) {
                    return file;
                }
            }
            return path;
        }
    }
}

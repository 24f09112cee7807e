package io.txnlog.spark;


import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's Parquet file format, writing each task's rows into one file per topic partition: the native path's
 * keyed write ({@code txnsink.write} with a key), without a partition column, a sort or a Python worker.
 *
 * <p>Contract: {@code df.write.format(KeyedParquetFormat.class.getName())} with the options {@link #KEY} (the key
 * columns' positions in the rows, comma-separated), {@link #PARTITIONS} (the topic's partition count) and
 * {@link #FOLDER} (the folder name prefix) writes the row whose {@link KeyHash} partition is {@code p} into
 * {@code <FOLDER>=<p>/<name>} beside the file Spark asked for, {@code <name>} being that file's name: the layout
 * {@code partitionBy(FOLDER)} gives, inside the task attempt's folder, so Spark's commit protocol publishes a task's
 * files together or not at all. A task writes no file for a partition it has no row for, and never the file Spark
 * named. Reading goes through {@link ParquetFileFormat} unchanged. Missing or invalid options fail the write when it
 * is planned ({@link IllegalArgumentException}).
 */
public class KeyedParquetFormat extends ParquetFileFormat {
    private static final long serialVersionUID = 1L;
    public static final String KEY = "txnlog.key";
    public static final String PARTITIONS = "txnlog.partitions";
    public static final String FOLDER = "txnlog.folder";

    @Override
    public OutputWriterFactory prepareWrite(SparkSession session, Job job,
                                            scala.collection.immutable.Map<String, String> options,
                                            StructType dataSchema) {
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
        KeyHash hash = new KeyHash(dataSchema, ordinals, partitions);
        OutputWriterFactory files = super.prepareWrite(session, job, options, dataSchema);
        return new Factory(files, hash, partitions, folder);
    }

    @Override
    public String toString() {
        return "TxnlogKeyedParquet";
    }

    private static final class Factory extends OutputWriterFactory {
        private static final long serialVersionUID = 1L;
        private final OutputWriterFactory files;
        private final KeyHash hash;
        private final int partitions;
        private final String folder;

        Factory(OutputWriterFactory files, KeyHash hash, int partitions, String folder) {
            this.files = files;
            this.hash = hash;
            this.partitions = partitions;
            this.folder = folder;
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

    /** Routes each row to its partition's file, opened at the partition's first row. */
    private static final class Writer extends OutputWriter {
        private final Factory factory;
        private final String path;
        private final String dir;
        private final String name;
        private final StructType schema;
        private final TaskAttemptContext context;
        private final OutputWriter[] writers;

        Writer(Factory factory, String path, StructType schema, TaskAttemptContext context) {
            this.factory = factory;
            this.path = path;
            int slash = path.lastIndexOf('/');
            this.dir = path.substring(0, slash);
            this.name = path.substring(slash + 1);
            this.schema = schema;
            this.context = context;
            this.writers = new OutputWriter[factory.partitions];
        }

        @Override
        public void write(InternalRow row) {
            int p = factory.hash.partition(row);
            OutputWriter w = writers[p];
            if (w == null) {
                w = factory.files.newInstance(dir + "/" + factory.folder + "=" + p + "/" + name, schema, context);
                writers[p] = w;
            }
            w.write(row);
        }

        @Override
        public void close() {
            RuntimeException first = null;
            for (int p = 0; p < writers.length; p++) {
                if (writers[p] == null) {
                    continue;
                }
                try {
                    writers[p].close();
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

        @Override
        public String path() {
            return path;
        }
    }
}

package io.txnlog.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.execution.datasources.FileFormat;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The file index of a scan whose files are known with their sizes: the native read path's segments, each named with
 * its size by the commit that published it. Nothing is listed when Spark plans the scan (a folder listing costs a
 * request per folder, a path one per file, and every plan of a micro-batch paid them).
 *
 * <p>Contract: {@link #listFiles} returns the given files, unpartitioned, whatever the filters; a file that is gone
 * or has another size fails the read when a task opens it (the scan's options keep {@code ignoreMissingFiles} and
 * {@code ignoreCorruptFiles} off). Modification times read as 0: the segments are immutable, and no column the
 * native read path gives is made of them.
 */
final class KnownFiles implements FileIndex {
    private final FileStatus[] files;
    private final scala.collection.immutable.Seq<Path> roots;
    private final long bytes;

    /** The index of {@code files}: each an array of its URL (as Spark's file system names it) and its size. */
    KnownFiles(List<List<Object>> files) {
        this.files = new FileStatus[files.size()];
        List<Path> paths = new ArrayList<>();
        long total = 0;
        for (int i = 0; i < files.size(); i++) {
            List<Object> f = files.get(i);
            if (f.size() != 2 || !(f.get(0) instanceof String) || !(f.get(1) instanceof Number)) {
                throw new IllegalArgumentException("txnlog: a scan's file is [url, size], not " + f);
            }
            Path path = new Path((String) f.get(0));
            long size = ((Number) f.get(1)).longValue();
            this.files[i] = new FileStatus(size, false, 1, size, 0L, path);
            paths.add(path);
            total += size;
        }
        this.roots = CollectionConverters.asScala(paths).toList();
        this.bytes = total;
    }

    /**
     * A relation reading these files with {@code format}, the data schema {@code schema} and {@code options}.
     *
     * @throws java.io.UncheckedIOException Spark has no file system for the files' scheme (as a listing would have
     *     failed when the scan was planned; Hadoop's file systems are cached, so this asks no store anything)
     */
    HadoopFsRelation relation(org.apache.spark.sql.classic.SparkSession session, StructType schema, FileFormat format,
                              Map<String, String> options) {
        scala.collection.immutable.Map<String, String> opts =
            scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(options));
        if (files.length > 0) {
            try {
                files[0].getPath().getFileSystem(session.sessionState().newHadoopConfWithOptions(opts));
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return new HadoopFsRelation(this, new StructType(), schema, scala.Option.empty(), format, opts, session);
    }

    @Override
    public scala.collection.immutable.Seq<Path> rootPaths() {
        return roots;
    }

    @Override
    public scala.collection.immutable.Seq<PartitionDirectory> listFiles(
            scala.collection.immutable.Seq<Expression> partitionFilters,
            scala.collection.immutable.Seq<Expression> dataFilters) {
        return CollectionConverters.asScala(List.of(PartitionDirectory.apply(InternalRow$.MODULE$.empty(), files)))
            .toList();
    }

    @Override
    public String[] inputFiles() {
        String[] out = new String[files.length];
        for (int i = 0; i < files.length; i++) {
            out[i] = files[i].getPath().toString();
        }
        return out;
    }

    @Override
    public void refresh() {
        // the files are immutable and known: there is nothing to list again
    }

    @Override
    public long sizeInBytes() {
        return bytes;
    }

    @Override
    public StructType partitionSchema() {
        return new StructType();
    }

    @Override
    public String toString() {
        return "KnownFiles[" + files.length + " files]";
    }
}

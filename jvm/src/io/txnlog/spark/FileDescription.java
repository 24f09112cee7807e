package io.txnlog.spark;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * What the native write path's driver needs of a segment file, computed by the task that wrote it: so the driver
 * never reads the data again.
 *
 * <p>Contract: {@link #write} reads a closed file of the local file system back (from the page cache, as it was
 * just written), computes its size and CRC-32, syncs its data to the disk, and writes beside it the file
 * {@code <name>}{@link #SUFFIX}, holding {@code {"rows": n, "size": s, "crc32": c}} as JSON. A file of any other
 * file system is left undescribed (the driver then reads it). Errors are {@link UncheckedIOException}s: the task
 * fails and Spark reruns it.
 */
final class FileDescription {
    /** The name suffix of a description. */
    static final String SUFFIX = ".txnlog.json";

    private FileDescription() {
    }

    /** Describe {@code file} ({@code rows} rows), when it is on the local file system. */
    static void write(String file, long rows, Configuration conf) {
        try {
            Path path = new Path(file);
            FileSystem fs = path.getFileSystem(conf);
            if (!(fs instanceof LocalFileSystem)) {
                return;
            }
            File local = ((LocalFileSystem) fs).pathToFile(path);
            long size;
            CRC32 crc = new CRC32();
            try (FileChannel ch = FileChannel.open(local.toPath(), StandardOpenOption.READ,
                    StandardOpenOption.WRITE)) {
                size = ch.size();
                ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
                while (ch.read(buf) > 0) {
                    buf.flip();
                    crc.update(buf);
                    buf.clear();
                }
                ch.force(true);  // Spark's writer does not sync; a committed segment must survive a machine crash
            }
            String json = "{\"rows\": " + rows + ", \"size\": " + size + ", \"crc32\": " + crc.getValue() + "}";
            File out = new File(local.getPath() + SUFFIX);
            try (FileChannel ch = FileChannel.open(out.toPath(), StandardOpenOption.WRITE,
                    StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING)) {
                ByteBuffer bytes = ByteBuffer.wrap(json.getBytes(StandardCharsets.UTF_8));
                while (bytes.hasRemaining()) {
                    ch.write(bytes);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("txnlog: cannot describe " + file, e);
        }
    }
}

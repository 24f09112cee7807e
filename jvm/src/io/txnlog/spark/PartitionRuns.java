package io.txnlog.spark;

import java.util.Arrays;
import java.util.function.Consumer;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.unsafe.Platform;

/**
 * A task's rows buffered per topic partition, so each partition's Parquet writer takes them in runs.
 *
 * <p>Handing each row to its partition's writer as it comes has every row touch a different writer's encoders,
 * statistics and buffers: eight writers open per task cost a third more than one writer taking the same rows
 * (bench, 10M rows). Runs of a few thousand rows per writer cost what one writer costs.
 *
 * <p>Contract: {@link #add} copies an {@link UnsafeRow}'s bytes into its partition's buffer and says when that
 * buffer holds at least {@link #runBytes} bytes; {@link #drain} hands the partition's buffered rows, in the order
 * added, to a consumer (one reused row object, valid during the call only) and empties the buffer. Memory: about
 * {@code partitions * runBytes}, bounded by {@link #TASK_BYTES} (runs shrink as partitions grow, to
 * {@link #MIN_RUN_BYTES}).
 */
final class PartitionRuns {
    /** Buffered bytes a task aims at across its partitions. */
    static final int TASK_BYTES = 4 << 20;
    /** The smallest run. */
    static final int MIN_RUN_BYTES = 16 << 10;
    private static final int MAX_RUN_BYTES = 256 << 10;

    private final byte[][] buffers;
    private final int[] used;
    private final UnsafeRow row;
    private final int runBytes;

    PartitionRuns(int partitions, int fields) {
        this.buffers = new byte[partitions][];
        this.used = new int[partitions];
        this.row = new UnsafeRow(fields);
        this.runBytes = Math.max(MIN_RUN_BYTES, Math.min(MAX_RUN_BYTES, TASK_BYTES / Math.max(1, partitions)));
    }

    /** Buffer {@code r} for partition {@code p}; true when that partition's run is full. */
    boolean add(int p, UnsafeRow r) {
        int size = r.getSizeInBytes();
        byte[] buf = buffers[p];
        int need = used[p] + 4 + size;
        if (buf == null || need > buf.length) {
            buf = buffers[p] = buf == null ? new byte[Math.max(need, runBytes + (runBytes >> 2))]
                    : Arrays.copyOf(buf, Math.max(need, buf.length * 2));
        }
        Platform.putInt(buf, Platform.BYTE_ARRAY_OFFSET + used[p], size);
        r.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + used[p] + 4);
        used[p] = need;
        return need >= runBytes;
    }

    /** Hand partition {@code p}'s buffered rows to {@code sink}, in order, and empty its buffer. */
    void drain(int p, Consumer<InternalRow> sink) {
        byte[] buf = buffers[p];
        int end = used[p];
        int off = 0;
        while (off < end) {
            int size = Platform.getInt(buf, Platform.BYTE_ARRAY_OFFSET + off);
            row.pointTo(buf, Platform.BYTE_ARRAY_OFFSET + off + 4, size);
            sink.accept(row);
            off += 4 + size;
        }
        used[p] = 0;
    }

    /** Whether partition {@code p} has buffered rows. */
    boolean holds(int p) {
        return used[p] > 0;
    }
}

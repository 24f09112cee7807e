package io.txnlog.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Which columns of a Parquet file keep dictionary encoding, decided once per file from its first rows.
 *
 * <p>Parquet's writer decides per column chunk: every row group starts a dictionary, and at the chunk's first page
 * (at most {@code parquet.page.row.count.limit} rows, 20,000 by default) keeps it only if the dictionary plus the
 * dictionary-encoded values are smaller than the plain values, else re-encodes the page plainly and writes the rest
 * of the chunk plainly. A column of mostly distinct values (ids, measurements, event times) thus pays for a
 * dictionary and its fallback in every row group; segments have row groups of 256K rows (a file of Spark's own
 * write has one of up to 128 MiB), so such columns cost a native write a fifth of its time.
 *
 * <p>Contract: {@link #context} judges each column of plain type (integers, floats, decimals, dates, timestamps,
 * strings, binaries; booleans and other types are left to Parquet) over the given rows as Parquet judges a first
 * page (dictionary bytes above {@code parquet.dictionary.page.size}, or dictionary plus encoded values not smaller
 * than the plain values: no dictionary), and returns a task context whose configuration turns the dictionary off
 * ({@code parquet.enable.dictionary#<column>=false}) for every column judged so; the given context when none is, or
 * when dictionaries are off for the whole file already. Nulls are not values. Columns that keep their dictionary are
 * still judged by Parquet in every row group.
 */
final class DictionaryChoice {
    /** Parquet's first page: {@code parquet.page.row.count.limit}'s default. */
    static final int DEFAULT_SAMPLE_ROWS = 20_000;
    /** The most bytes of rows a file buffers before deciding (a sample of wide rows stops early). */
    static final long SAMPLE_BYTES = 8L << 20;
    private static final String ENABLE = "parquet.enable.dictionary";
    private static final long DEFAULT_DICTIONARY_PAGE = 1L << 20;

    private DictionaryChoice() {
    }

    /** Rows a file buffers before {@link #context} (Parquet's first page), 0 when dictionaries are off anyway. */
    static int sampleRows(Configuration conf) {
        if (!conf.getBoolean(ENABLE, true)) {
            return 0;
        }
        return Math.max(1, conf.getInt("parquet.page.row.count.limit", DEFAULT_SAMPLE_ROWS));
    }

    /**
     * The task context to open the file's writers with: {@code context}, or a copy of it whose configuration turns
     * the dictionary off for the columns of {@code schema} that would drop it on a first page of {@code rows}.
     */
    static TaskAttemptContext context(TaskAttemptContext context, StructType schema, List<InternalRow> rows) {
        Configuration conf = context.getConfiguration();
        List<String> plain = plainColumns(schema, rows, conf.getLong("parquet.dictionary.page.size",
                DEFAULT_DICTIONARY_PAGE));
        if (plain.isEmpty()) {
            return context;
        }
        Configuration copy = new Configuration(conf);
        for (String column : plain) {
            copy.setBoolean(ENABLE + "#" + column, false);
        }
        return new TaskAttemptContextImpl(copy, context.getTaskAttemptID());
    }

    /** The names of the columns of {@code schema} whose dictionary a first page of {@code rows} would drop. */
    static List<String> plainColumns(StructType schema, List<InternalRow> rows, long dictionaryPage) {
        List<String> out = new ArrayList<>();
        StructField[] fields = schema.fields();
        for (int i = 0; i < fields.length; i++) {
            int width = width(fields[i].dataType());
            if (width != 0 && !keepsDictionary(fields[i].dataType(), i, width, rows, dictionaryPage)) {
                out.add(fields[i].name());
            }
        }
        return out;
    }

    /** Bytes of a plain value of {@code t} (-1: variable, 4 bytes of length and the bytes), 0: left to Parquet. */
    private static int width(DataType t) {
        if (t instanceof ByteType || t instanceof ShortType || t instanceof IntegerType || t instanceof DateType
                || t instanceof FloatType) {
            return 4;
        }
        if (t instanceof LongType || t instanceof DoubleType || t instanceof TimestampType
                || t instanceof TimestampNTZType) {
            return 8;
        }
        if (t instanceof DecimalType) {
            int p = ((DecimalType) t).precision();
            // Spark's (non-legacy) Parquet decimals: INT32, INT64, else the fewest bytes holding the precision
            return p <= 9 ? 4 : p <= 18 ? 8 : (int) Math.ceil((p * Math.log(10) / Math.log(2) + 1) / 8);
        }
        if (t instanceof StringType || t instanceof BinaryType) {
            return -1;
        }
        return 0;
    }

    private static boolean keepsDictionary(DataType t, int ordinal, int width, List<InternalRow> rows,
                                           long dictionaryPage) {
        Set<Object> seen = new HashSet<>();
        long raw = 0;
        long dictionary = 0;
        long values = 0;
        for (InternalRow row : rows) {
            if (row.isNullAt(ordinal)) {
                continue;
            }
            values++;
            Object v = value(t, row, ordinal);
            long size = width > 0 ? width
                    : 4L + (v instanceof UTF8String ? ((UTF8String) v).numBytes() : ((ByteBuffer) v).remaining());
            raw += size;
            if (seen.add(v)) {
                dictionary += size;
                if (dictionary > dictionaryPage) {
                    return false;
                }
            }
        }
        if (values == 0) {
            return true;
        }
        int bits = 32 - Integer.numberOfLeadingZeros(Math.max(0, seen.size() - 1));
        long encoded = (values * bits + 7) / 8;
        return encoded + dictionary < raw;
    }

    private static Object value(DataType t, InternalRow row, int i) {
        if (t instanceof ByteType) {
            return (int) row.getByte(i);
        }
        if (t instanceof ShortType) {
            return (int) row.getShort(i);
        }
        if (t instanceof IntegerType || t instanceof DateType) {
            return row.getInt(i);
        }
        if (t instanceof FloatType) {
            return Float.floatToRawIntBits(row.getFloat(i));
        }
        if (t instanceof DoubleType) {
            return Double.doubleToRawLongBits(row.getDouble(i));
        }
        if (t instanceof DecimalType) {
            DecimalType d = (DecimalType) t;
            return row.getDecimal(i, d.precision(), d.scale());
        }
        if (t instanceof StringType) {
            return row.getUTF8String(i);
        }
        if (t instanceof BinaryType) {
            return ByteBuffer.wrap(row.getBinary(i));
        }
        return row.getLong(i);
    }
}

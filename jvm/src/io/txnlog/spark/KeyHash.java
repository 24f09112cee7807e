package io.txnlog.spark;

import java.io.Serializable;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The {@code txnlog-v2} partitioner of {@code coordinator.partitioner} over Spark's internal rows: the same
 * partition, bit for bit, as the Python producer gives the same values.
 *
 * <p>Contract: a value becomes 64-bit words (integers, dates and microsecond timestamps their value sign-extended,
 * booleans 0 or 1, floats the bits of the value as a double with -0.0 as 0.0 and one NaN, strings and binaries the
 * byte polynomial {@code sum(b[i] * M^i)} and the length); a value's hash is {@code h = SEED; h = fmix64(h ^ w)} per
 * word, a null's {@code NULL_HASH}; a row's is {@code r = SEED; r = fmix64(r * ROW_MULTIPLIER + h)} per key column,
 * and its partition {@code r mod partitions} (unsigned). Key columns of other types are refused when the hash is
 * built ({@link IllegalArgumentException}); the caller decides which topics' types qualify.
 */
public final class KeyHash implements Serializable {
    private static final long serialVersionUID = 1L;
    static final long SEED = 0x9E3779B97F4A7C15L;
    static final long NULL_HASH = 0x6A09E667F3BCC909L;
    static final long ROW_MULTIPLIER = 0x100000001B3L;
    static final long BYTE_MULTIPLIER = 0xC2B2AE3D27D4EB4FL;

    private enum Kind { BYTE, SHORT, INT, LONG, BOOLEAN, FLOAT, DOUBLE, STRING, BINARY }

    private final int[] ordinals;
    private final Kind[] kinds;
    private final int partitions;

    /**
     * @param schema the rows' schema
     * @param ordinals the key columns' positions in it, in key order
     * @param partitions the topic's partition count (positive)
     * @throws IllegalArgumentException a key column's type has no rule here, or an argument is out of range
     */
    public KeyHash(StructType schema, int[] ordinals, int partitions) {
        if (partitions < 1 || ordinals.length == 0) {
            throw new IllegalArgumentException("txnlog: a key needs columns and at least one partition");
        }
        this.ordinals = ordinals.clone();
        this.kinds = new Kind[ordinals.length];
        this.partitions = partitions;
        for (int i = 0; i < ordinals.length; i++) {
            if (ordinals[i] < 0 || ordinals[i] >= schema.length()) {
                throw new IllegalArgumentException("txnlog: no key column at position " + ordinals[i]);
            }
            kinds[i] = kind(schema.fields()[ordinals[i]].dataType());
        }
    }

    private static Kind kind(DataType t) {
        if (t instanceof ByteType) return Kind.BYTE;
        if (t instanceof ShortType) return Kind.SHORT;
        if (t instanceof IntegerType || t instanceof DateType) return Kind.INT;
        if (t instanceof LongType || t instanceof TimestampType || t instanceof TimestampNTZType) return Kind.LONG;
        if (t instanceof BooleanType) return Kind.BOOLEAN;
        if (t instanceof FloatType) return Kind.FLOAT;
        if (t instanceof DoubleType) return Kind.DOUBLE;
        if (t instanceof StringType) return Kind.STRING;
        if (t instanceof BinaryType) return Kind.BINARY;
        throw new IllegalArgumentException("txnlog: the JVM partitioner has no rule for key type " + t.simpleString());
    }

    static long fmix64(long h) {
        h ^= h >>> 33;
        h *= 0xFF51AFD7ED558CCDL;
        h ^= h >>> 33;
        h *= 0xC4CEB9FE1A85EC53L;
        h ^= h >>> 33;
        return h;
    }

    private static long doubleWord(double d) {
        return Double.doubleToLongBits(d == 0.0 ? 0.0 : d);  // one NaN: doubleToLongBits canonicalises it
    }

    private static long bytesHash(Object base, long offset, int length) {
        long p = 0;
        long m = 1;
        for (int i = 0; i < length; i++) {
            p += (Platform.getByte(base, offset + i) & 0xFFL) * m;
            m *= BYTE_MULTIPLIER;
        }
        return fmix64(fmix64(SEED ^ p) ^ (long) length);
    }

    private long valueHash(InternalRow row, int i) {
        int o = ordinals[i];
        if (row.isNullAt(o)) {
            return NULL_HASH;
        }
        switch (kinds[i]) {
            case BYTE: return fmix64(SEED ^ row.getByte(o));
            case SHORT: return fmix64(SEED ^ row.getShort(o));
            case INT: return fmix64(SEED ^ row.getInt(o));
            case LONG: return fmix64(SEED ^ row.getLong(o));
            case BOOLEAN: return fmix64(SEED ^ (row.getBoolean(o) ? 1L : 0L));
            case FLOAT: return fmix64(SEED ^ doubleWord(row.getFloat(o)));
            case DOUBLE: return fmix64(SEED ^ doubleWord(row.getDouble(o)));
            case STRING: {
                UTF8String s = row.getUTF8String(o);
                return bytesHash(s.getBaseObject(), s.getBaseOffset(), s.numBytes());
            }
            default: {
                byte[] b = row.getBinary(o);
                return bytesHash(b, Platform.BYTE_ARRAY_OFFSET, b.length);
            }
        }
    }

    /** The row's 64-bit key hash. */
    public long hash(InternalRow row) {
        long r = SEED;
        for (int i = 0; i < ordinals.length; i++) {
            r = fmix64(r * ROW_MULTIPLIER + valueHash(row, i));
        }
        return r;
    }

    /** The row's partition, in {@code [0, partitions)}. */
    public int partition(InternalRow row) {
        return (int) Long.remainderUnsigned(hash(row), partitions);
    }
}

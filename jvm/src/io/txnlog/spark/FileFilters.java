package io.txnlog.spark;

import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.Not;
import org.apache.spark.sql.sources.Or;

/**
 * Which rows of one segment file a pushed filter can match, judged from the file's computed values alone: its
 * topic, its partition, its offset range ({@code [base, base + rows)}), the range of its commit times and, for a
 * file given one, its producer time.
 *
 * <p>Contract: {@link #match} answers {@link Match#NONE} only when no row of the file can satisfy the filter, and
 * {@link Match#ALL} only when every row does; anything it cannot judge (other columns, other filter kinds, values
 * of other types) is {@link Match#SOME}, so a file is skipped only when that is certain. Spark evaluates every
 * filter again on the rows read, so an answer of SOME or ALL never changes a result.
 */
final class FileFilters {
    enum Match { NONE, SOME, ALL }

    private FileFilters() {
    }

    /** How the rows of {@code seg} (of topic {@code topic}) match {@code filter}. */
    static Match match(Filter filter, SegmentFormat.Segment seg, String topic) {
        if (filter instanceof And) {
            Match l = match(((And) filter).left(), seg, topic);
            Match r = match(((And) filter).right(), seg, topic);
            return l == Match.NONE || r == Match.NONE ? Match.NONE
                : l == Match.ALL && r == Match.ALL ? Match.ALL : Match.SOME;
        }
        if (filter instanceof Or) {
            Match l = match(((Or) filter).left(), seg, topic);
            Match r = match(((Or) filter).right(), seg, topic);
            return l == Match.ALL || r == Match.ALL ? Match.ALL
                : l == Match.NONE && r == Match.NONE ? Match.NONE : Match.SOME;
        }
        if (filter instanceof Not) {
            Match c = match(((Not) filter).child(), seg, topic);
            return c == Match.NONE ? Match.ALL : c == Match.ALL ? Match.NONE : Match.SOME;
        }
        if (filter instanceof IsNull) {
            return valued(((IsNull) filter).attribute(), seg) ? Match.NONE : Match.SOME;
        }
        if (filter instanceof IsNotNull) {
            return valued(((IsNotNull) filter).attribute(), seg) ? Match.ALL : Match.SOME;
        }
        if (filter instanceof EqualTo) {
            return compare(((EqualTo) filter).attribute(), ((EqualTo) filter).value(), seg, topic, 0, 0);
        }
        if (filter instanceof EqualNullSafe) {
            return compare(((EqualNullSafe) filter).attribute(), ((EqualNullSafe) filter).value(), seg, topic, 0, 0);
        }
        if (filter instanceof GreaterThan) {
            return compare(((GreaterThan) filter).attribute(), ((GreaterThan) filter).value(), seg, topic, 1, 1);
        }
        if (filter instanceof GreaterThanOrEqual) {
            GreaterThanOrEqual f = (GreaterThanOrEqual) filter;
            return compare(f.attribute(), f.value(), seg, topic, 0, 1);
        }
        if (filter instanceof LessThan) {
            return compare(((LessThan) filter).attribute(), ((LessThan) filter).value(), seg, topic, -1, -1);
        }
        if (filter instanceof LessThanOrEqual) {
            LessThanOrEqual f = (LessThanOrEqual) filter;
            return compare(f.attribute(), f.value(), seg, topic, -1, 0);
        }
        if (filter instanceof In) {
            In in = (In) filter;
            boolean some = false;
            for (Object v : in.values()) {
                Match m = compare(in.attribute(), v, seg, topic, 0, 0);
                if (m == Match.ALL) {
                    return Match.ALL;
                }
                some |= m == Match.SOME;
            }
            return some ? Match.SOME : Match.NONE;
        }
        return Match.SOME;
    }

    /**
     * How the column {@code attribute} compares with {@code value}: a row matches when the sign of (column -
     * value) lies in {@code [lo, hi]} (equality: 0..0; greater than: 1..1; less or equal: -1..0).
     */
    private static Match compare(String attribute, Object value, SegmentFormat.Segment seg, String topic, int lo,
                                 int hi) {
        if (value == null) {
            return Match.SOME;
        }
        if ("_topic".equals(attribute)) {
            // equality only: Java orders strings by UTF-16 units, Spark by UTF-8 bytes
            if (!(value instanceof String) || lo != 0 || hi != 0) {
                return Match.SOME;
            }
            return topic.equals(value) ? Match.ALL : Match.NONE;
        }
        long min;
        long max;
        if ("_partition".equals(attribute)) {
            min = seg.partition;
            max = seg.partition;
        } else if ("_offset".equals(attribute)) {
            if (seg.rows <= 0) {
                return Match.NONE;
            }
            min = seg.base;
            max = seg.base + seg.rows - 1;
        } else if (SegmentFormat.PRODUCER_TIME.equals(attribute) && seg.producerTime != null) {
            Long micros = micros(value);
            if (micros == null) {
                return Match.SOME;
            }
            return bounds(seg.producerTime, seg.producerTime, micros, lo, hi);
        } else if ("_timestamp".equals(attribute)) {
            Long micros = micros(value);
            if (micros == null) {
                return Match.SOME;
            }
            min = Long.MAX_VALUE;
            max = Long.MIN_VALUE;
            for (long t : seg.micros) {
                min = Math.min(min, t);
                max = Math.max(max, t);
            }
            // commit times are not every value between min and max: judged by the bounds alone, which still holds
            return bounds(min, max, micros, lo, hi);
        } else {
            return Match.SOME;
        }
        if (!(value instanceof Integer || value instanceof Long || value instanceof Short || value instanceof Byte)) {
            return Match.SOME;
        }
        return bounds(min, max, ((Number) value).longValue(), lo, hi);
    }

    /** Whether every row of {@code seg} has a value in the column {@code attribute}, known without reading it. */
    private static boolean valued(String attribute, SegmentFormat.Segment seg) {
        return SegmentFormat.computed(attribute) >= 0
            || (SegmentFormat.PRODUCER_TIME.equals(attribute) && seg.producerTime != null);
    }

    /**
     * How rows whose values lie in {@code [min, max]} (both taken) compare with {@code v}: every sign of (column -
     * v) lies in [sign(min - v), sign(max - v)], so ALL when that range is inside {@code [lo, hi]}, NONE when the two
     * do not meet (either answer holds whichever values between the bounds the rows take), SOME otherwise.
     */
    private static Match bounds(long min, long max, long v, int lo, int hi) {
        int smin = Long.compare(min, v);
        int smax = Long.compare(max, v);
        if (smin >= lo && smax <= hi) {
            return Match.ALL;
        }
        return smax < lo || smin > hi ? Match.NONE : Match.SOME;
    }

    /** A timestamp filter value in microseconds since the epoch, or null for a value of another type. */
    private static Long micros(Object value) {
        if (value instanceof java.sql.Timestamp) {
            return DateTimeUtils.fromJavaTimestamp((java.sql.Timestamp) value);
        }
        if (value instanceof java.time.Instant) {
            return DateTimeUtils.instantToMicros((java.time.Instant) value);
        }
        return null;
    }
}

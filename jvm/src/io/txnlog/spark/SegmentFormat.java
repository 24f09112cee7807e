package io.txnlog.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Function1;
import scala.Option;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's Parquet file format reading txnlog segments with their metadata columns computed inside the scan: the
 * native read path's scan ({@code txnsource.read}), whose rows then need no projection.
 *
 * <p>Contract: the read schema may name, besides the files' own columns, {@code _topic} (string: the option
 * {@link #TOPIC}), {@code _partition} (int), {@code _offset} (long: the file's first offset plus the row's index in
 * the file) and {@code _timestamp} (timestamp: the commit time of the row's run of rows); the per-file values come
 * from the option {@link #SEGMENTS}, one line per file: {@code size TAB name TAB partition TAB first offset TAB
 * rows TAB runs TAB producer time}, runs being {@code first row:commit micros} separated by {@code ;} in row order,
 * the producer time in microseconds or empty. A file is found by its size, and among files of equal size by its
 * name; a file the option does not describe fails the task. The files' own columns are read by Spark's Parquet
 * reader unchanged (its vectorised batches get the computed columns appended as vectors; rows, when Spark reads
 * rows, get them appended as values), except {@code _producerTimestamp} of a file given a producer time (such a file
 * has no column of that name): every row gets that time. Filters naming a computed column, or
 * {@code _producerTimestamp} when any file is given a producer time, are not pushed into Parquet (a file has no
 * such column; Spark applies them after the scan); a file that such a filter excludes whole ({@link FileFilters})
 * is not opened.
 */
public class SegmentFormat extends ParquetFileFormat {
    private static final long serialVersionUID = 1L;
    public static final String TOPIC = "txnlog.topic";
    public static final String SEGMENTS = "txnlog.segments";
    static final String[] COMPUTED = {"_topic", "_partition", "_offset", "_timestamp"};
    /** The producer-time column: the file's own, or one time per file. */
    static final String PRODUCER_TIME = "_producerTimestamp";
    private static final String GENERIC_VECTOR = ColumnVector.class.getName();

    static int computed(String name) {
        for (int i = 0; i < COMPUTED.length; i++) {
            if (COMPUTED[i].equals(name)) {
                return i;
            }
        }
        return -1;
    }

    /** One file's values. */
    static final class Segment implements Serializable {
        private static final long serialVersionUID = 1L;
        final String name;
        final int partition;
        final long base;
        final long rows;
        final long[] firstRows;
        final long[] micros;
        /** The producer time of every row (microseconds), or null when the file has its own column. */
        final Long producerTime;

        Segment(String name, int partition, long base, long rows, long[] firstRows, long[] micros,
                Long producerTime) {
            this.name = name;
            this.partition = partition;
            this.base = base;
            this.rows = rows;
            this.firstRows = firstRows;
            this.micros = micros;
            this.producerTime = producerTime;
        }

        long microsAt(long row) {
            int lo = 0;
            int hi = firstRows.length - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) >>> 1;
                if (firstRows[mid] <= row) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            return micros[lo];
        }
    }

    static Map<Long, List<Segment>> parse(String text) {
        Map<Long, List<Segment>> out = new HashMap<>();
        for (String line : text.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f.length != 7) {
                throw new IllegalArgumentException("txnlog: malformed " + SEGMENTS + " line: " + line);
            }
            String[] runs = f[5].split(";");
            long[] firstRows = new long[runs.length];
            long[] micros = new long[runs.length];
            for (int i = 0; i < runs.length; i++) {
                String[] r = runs[i].split(":");
                firstRows[i] = Long.parseLong(r[0]);
                micros[i] = Long.parseLong(r[1]);
            }
            out.computeIfAbsent(Long.parseLong(f[0]), k -> new ArrayList<>())
                .add(new Segment(f[1], Integer.parseInt(f[2]), Long.parseLong(f[3]), Long.parseLong(f[4]),
                    firstRows, micros, f[6].isEmpty() ? null : Long.valueOf(f[6])));
        }
        return out;
    }

    @Override
    public Option<scala.collection.immutable.Seq<String>> vectorTypes(StructType requiredSchema,
                                                                     StructType partitionSchema, SQLConf conf) {
        Option<scala.collection.immutable.Seq<String>> types = super.vectorTypes(requiredSchema, partitionSchema, conf);
        if (types.isEmpty()) {
            return types;
        }
        List<String> out = new ArrayList<>(CollectionConverters.asJava(types.get()));
        for (int i = 0; i < requiredSchema.length(); i++) {
            String name = requiredSchema.fields()[i].name();
            if (computed(name) >= 0 || PRODUCER_TIME.equals(name)) {
                out.set(i, GENERIC_VECTOR);
            }
        }
        return Option.apply(CollectionConverters.asScala(out).toList());
    }

    /** {@code schema} as Spark's Parquet reader reads it: the computed columns left out, the row index added. */
    static StructType inner(StructType schema) {
        List<StructField> out = new ArrayList<>();
        for (StructField f : schema.fields()) {
            if (computed(f.name()) < 0 && !f.name().equals(ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME())) {
                out.add(f);
            }
        }
        out.add(new StructField(ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME(), DataTypes.LongType, true,
                Metadata.empty()));
        return new StructType(out.toArray(new StructField[0]));
    }

    /** Batches only where Spark's Parquet reader returns batches for the columns it reads ({@link #inner}). */
    @Override
    public boolean supportBatch(SparkSession session, StructType schema) {
        return super.supportBatch(session, schema) && super.supportBatch(session, inner(schema));
    }

    @Override
    public Function1<PartitionedFile, Iterator<InternalRow>> buildReaderWithPartitionValues(
            SparkSession session, StructType dataSchema, StructType partitionSchema, StructType requiredSchema,
            scala.collection.immutable.Seq<Filter> filters, scala.collection.immutable.Map<String, String> options,
            Configuration hadoopConf) {
        Map<Long, List<Segment>> segments = parse(Options.required(options, SEGMENTS, "the segment scan"));
        String topicName = Options.required(options, TOPIC, "the segment scan");
        byte[] topic = topicName.getBytes(StandardCharsets.UTF_8);
        int[] source = new int[requiredSchema.length()];  // inner column, or -1 - computed index
        int next = 0;
        for (int i = 0; i < requiredSchema.length(); i++) {
            int c = computed(requiredSchema.fields()[i].name());
            source[i] = c >= 0 ? -1 - c : next++;
        }
        int rowIndex = next;
        int producerTime = requiredSchema.getFieldIndex(PRODUCER_TIME).isDefined()
            ? requiredSchema.fieldIndex(PRODUCER_TIME) : -1;
        boolean given = false;
        for (List<Segment> same : segments.values()) {
            for (Segment s : same) {
                given |= s.producerTime != null;
            }
        }
        StructType innerSchema = inner(requiredSchema);
        List<Filter> kept = new ArrayList<>();
        List<Filter> computedFilters = new ArrayList<>();
        for (Filter f : CollectionConverters.asJava(filters)) {
            boolean touches = false;
            for (String ref : f.references()) {
                touches |= computed(ref) >= 0 || ref.startsWith("_topic.") || ref.startsWith("_timestamp.")
                    || (given && (ref.equals(PRODUCER_TIME) || ref.startsWith(PRODUCER_TIME + ".")));
            }
            if (!touches) {
                kept.add(f);
            } else {
                computedFilters.add(f);
            }
        }
        if (partitionSchema.length() > 0) {
            throw new IllegalArgumentException("txnlog: a segment scan has no partition columns");
        }
        boolean batches = supportBatch(session, requiredSchema);
        Function1<PartitionedFile, Iterator<InternalRow>> read = super.buildReaderWithPartitionValues(session,
                dataSchema, partitionSchema, innerSchema, CollectionConverters.asScala(kept).toList(), options,
                hadoopConf);
        Filter[] skip = computedFilters.toArray(new Filter[0]);
        return (Function1<PartitionedFile, Iterator<InternalRow>> & Serializable) file -> {
            Segment seg = find(segments, file);
            for (Filter f : skip) {
                if (FileFilters.match(f, seg, topicName) == FileFilters.Match.NONE) {
                    return scala.collection.Iterator$.MODULE$.empty();
                }
            }
            Iterator<InternalRow> rows = read.apply(file);
            Iterator<?> out = new Computed(rows, seg, topic, source, requiredSchema, rowIndex,
                seg.producerTime == null ? -1 : producerTime, batches);
            @SuppressWarnings("unchecked")
            Iterator<InternalRow> typed = (Iterator<InternalRow>) out;
            return typed;
        };
    }

    private static Segment find(Map<Long, List<Segment>> segments, PartitionedFile file) {
        List<Segment> same = segments.get(file.fileSize());
        if (same != null && same.size() == 1) {
            return same.get(0);
        }
        if (same != null) {
            String name = file.toPath().getName();
            for (Segment s : same) {
                if (s.name.equals(name)) {
                    return s;
                }
            }
        }
        throw new IllegalStateException("txnlog: the scan has no values for the file " + file.urlEncodedPath()
            + " (" + file.fileSize() + " bytes)");
    }

    /** The error of a Spark that did not fill the row index (its column name is Spark's, not a public API). */
    static IllegalStateException unfilled() {
        return new IllegalStateException("txnlog: Spark did not fill "
            + ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME() + "; read with readPath=python");
    }

    /** The rows (or batches) of one file with the computed columns in place. */
    private static final class Computed extends AbstractIterator<Object> {
        private final Iterator<InternalRow> rows;
        private final Segment seg;
        private final byte[] topic;
        private final int[] source;
        private final StructType schema;
        private final DataType[] types;
        private final int rowIndex;
        private final int producerTime;
        private final boolean batches;
        private ConstantColumnVector producerVector;
        private ConstantColumnVector topicVector;
        private ConstantColumnVector partitionVector;
        private ConstantColumnVector timeVector;
        private OnHeapColumnVector offsets;
        private OnHeapColumnVector times;
        private int capacity;
        private scala.collection.Iterator<InternalRow> pending;
        private UnsafeProjection unsafe;

        /** {@code producerTime}: the output column given the segment's producer time, or -1. */
        Computed(Iterator<InternalRow> rows, Segment seg, byte[] topic, int[] source, StructType schema, int rowIndex,
                 int producerTime, boolean batches) {
            this.rows = rows;
            this.seg = seg;
            this.topic = topic;
            this.source = source;
            this.schema = schema;
            this.types = new DataType[schema.length()];
            for (int i = 0; i < types.length; i++) {
                types[i] = schema.fields()[i].dataType();
            }
            this.rowIndex = rowIndex;
            this.producerTime = producerTime;
            this.batches = batches;
        }

        @Override
        public boolean hasNext() {
            return (pending != null && pending.hasNext()) || rows.hasNext();
        }

        @Override
        public Object next() {
            if (pending != null && pending.hasNext()) {
                return row(pending.next());
            }
            Object got = rows.next();
            if (got instanceof ColumnarBatch) {
                ColumnarBatch batch = (ColumnarBatch) got;
                if (batches) {
                    return batch(batch);
                }
                pending = CollectionConverters.asScala(batch.rowIterator());
                return row(pending.next());
            }
            return row((InternalRow) got);
        }

        private void ensure(int n) {
            if (n <= capacity) {
                return;
            }
            capacity = Math.max(n, 4096);
            topicVector = new ConstantColumnVector(capacity, DataTypes.StringType);
            topicVector.setUtf8String(UTF8String.fromBytes(topic));
            partitionVector = new ConstantColumnVector(capacity, DataTypes.IntegerType);
            partitionVector.setInt(seg.partition);
            timeVector = new ConstantColumnVector(capacity, DataTypes.TimestampType);
            timeVector.setLong(seg.micros[0]);
            if (producerTime >= 0) {
                producerVector = new ConstantColumnVector(capacity, DataTypes.TimestampType);
                producerVector.setLong(seg.producerTime);
            }
            offsets = new OnHeapColumnVector(capacity, DataTypes.LongType);
            times = new OnHeapColumnVector(capacity, DataTypes.TimestampType);
        }

        private ColumnarBatch batch(ColumnarBatch batch) {
            int n = batch.numRows();
            ensure(n);
            ColumnVector index = batch.column(rowIndex);
            if (n > 0 && index.hasNull()) {
                throw unfilled();
            }
            ColumnVector[] out = new ColumnVector[source.length];
            for (int i = 0; i < source.length; i++) {
                if (i == producerTime) {
                    out[i] = producerVector;
                    continue;
                }
                switch (source[i]) {
                    case -1: out[i] = topicVector; break;
                    case -2: out[i] = partitionVector; break;
                    case -3:
                        for (int j = 0; j < n; j++) {
                            offsets.putLong(j, seg.base + index.getLong(j));
                        }
                        out[i] = offsets;
                        break;
                    case -4:
                        if (seg.micros.length == 1) {
                            out[i] = timeVector;
                        } else {
                            for (int j = 0; j < n; j++) {
                                times.putLong(j, seg.microsAt(index.getLong(j)));
                            }
                            out[i] = times;
                        }
                        break;
                    default: out[i] = batch.column(source[i]);
                }
            }
            return new ColumnarBatch(out, n);
        }

        private InternalRow row(InternalRow in) {
            if (in.isNullAt(rowIndex)) {
                throw unfilled();
            }
            long index = in.getLong(rowIndex);
            Object[] values = new Object[source.length];
            for (int i = 0; i < source.length; i++) {
                if (i == producerTime) {
                    values[i] = seg.producerTime;
                    continue;
                }
                switch (source[i]) {
                    case -1: values[i] = UTF8String.fromBytes(topic); break;
                    case -2: values[i] = seg.partition; break;
                    case -3: values[i] = seg.base + index; break;
                    case -4: values[i] = seg.microsAt(index); break;
                    default: values[i] = in.isNullAt(source[i]) ? null : in.get(source[i], types[i]);
                }
            }
            if (unsafe == null) {
                unsafe = UnsafeProjection.create(schema);
            }
            return unsafe.apply(new GenericInternalRow(values));
        }
    }
}

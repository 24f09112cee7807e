package io.txnlog.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import com.fasterxml.jackson.core.type.TypeReference;

/**
 * The stream of a {@code readStream.format("txnlog")} query under txnlog's session extension: what
 * {@link StreamResolutionRule} puts in place of the Python data source's table, so that no Python process is started
 * for the query (the Python stream starts one per query, about a second before its first micro-batch).
 *
 * <p>Contract: the offsets are the Python data source's stream reader's, computed by that same reader in txnlog's
 * planner process ({@link StreamCalls}, created when the query starts); Spark logs and commits them as it does the
 * Python stream's, and a checkpoint of either is read by the other. Micro-batches are never read by this class:
 * the read rule in force ({@link NativeReadRule} or {@link ExtensionReadRule}) replaces each micro-batch scan by
 * Spark's Parquet scan of exactly its offset range, and fails the micro-batch, saying why, where it cannot
 * ({@link #planInputPartitions} is reached only then). Queries the native scan cannot read at all (the resolution
 * rule asks first) keep the Python stream.
 */
final class TxnlogStream {
    private TxnlogStream() {
    }

    /** The table: the Python data source's, read as a micro-batch stream only. */
    static final class StreamTable implements Table, SupportsRead {
        private final Table delegate;
        private final SparkSession session;

        StreamTable(Table delegate, SparkSession session) {
            this.delegate = delegate;
            this.session = session;
        }

        @Override
        public String name() {
            return delegate.name();
        }

        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return delegate.schema();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            StructType schema = schema();
            return () -> new Scan() {
                @Override
                public StructType readSchema() {
                    return schema;
                }

                @Override
                public String description() {
                    return "txnlog";
                }

                @Override
                public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
                    Map<String, String> given = new HashMap<>(options.asCaseSensitiveMap());
                    return new Stream(PythonSide.planner(session).openStream(Options.toJson(given), schema.json()));
                }
            };
        }
    }

    /** An offset: the stream reader's JSON, compared as text (as Spark compares the Python stream's). */
    static final class JsonOffset extends Offset {
        private final String json;

        JsonOffset(String json) {
            this.json = json;
        }

        @Override
        public String json() {
            return json;
        }
    }

    /** The micro-batch stream: every call goes to the query's {@link StreamCalls}. */
    static final class Stream implements MicroBatchStream, SupportsTriggerAvailableNow {
        private final StreamCalls calls;

        Stream(Object calls) {
            if (!(calls instanceof StreamCalls)) {
                throw new IllegalStateException(String.valueOf(calls));
            }
            this.calls = (StreamCalls) calls;
        }

        @Override
        public Offset initialOffset() {
            return new JsonOffset(calls.initialOffset());
        }

        @Override
        public Offset deserializeOffset(String json) {
            return new JsonOffset(json);
        }

        @Override
        public ReadLimit getDefaultReadLimit() {
            return fromJson(calls.defaultReadLimit());
        }

        @Override
        public Offset latestOffset(Offset start, ReadLimit limit) {
            return new JsonOffset(calls.latestOffset(start.json(), toJson(limit)));
        }

        @Override
        public Offset latestOffset() {
            throw new UnsupportedOperationException("txnlog: latestOffset needs a start offset and a read limit");
        }

        @Override
        public Offset reportLatestOffset() {
            String got = calls.reportLatestOffset();
            return got == null ? null : new JsonOffset(got);
        }

        @Override
        public void prepareForTriggerAvailableNow() {
            calls.prepareForTriggerAvailableNow();
        }

        @Override
        public void commit(Offset end) {
            calls.commit(end.json());
        }

        @Override
        public void stop() {
            calls.stop();
        }

        @Override
        public InputPartition[] planInputPartitions(Offset start, Offset end) {
            throw new IllegalStateException("txnlog: the micro-batch from " + start.json() + " to " + end.json()
                    + " was not planned as a Parquet scan (is the session extension's read rule disabled?); restart"
                    + " the query with option readPath = python");
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            throw new IllegalStateException("txnlog: micro-batches of this stream are read by Spark's Parquet scan");
        }

        @Override
        public String toString() {
            return "txnlog";
        }
    }

    /** {@code limit} as pyspark's read limit JSON. @throws IllegalArgumentException for a limit pyspark lacks */
    static String toJson(ReadLimit limit) {
        Map<String, Object> out = new HashMap<>();
        if (limit instanceof ReadAllAvailable) {
            out.put("_type", "ReadAllAvailable");
        } else if (limit instanceof ReadMaxRows) {
            out.put("_type", "ReadMaxRows");
            out.put("max_rows", ((ReadMaxRows) limit).maxRows());
        } else if (limit instanceof ReadMinRows) {
            out.put("_type", "ReadMinRows");
            out.put("min_rows", ((ReadMinRows) limit).minRows());
        } else if (limit instanceof ReadMaxBytes) {
            out.put("_type", "ReadMaxBytes");
            out.put("max_bytes", ((ReadMaxBytes) limit).maxBytes());
        } else if (limit instanceof ReadMaxFiles) {
            out.put("_type", "ReadMaxFiles");
            out.put("max_files", ((ReadMaxFiles) limit).maxFiles());
        } else if (limit instanceof CompositeReadLimit && ((CompositeReadLimit) limit).getReadLimits().length == 1) {
            return toJson(((CompositeReadLimit) limit).getReadLimits()[0]);
        } else {
            throw new IllegalArgumentException("txnlog: no read limit like " + limit);
        }
        return Options.toJson(out);
    }

    /** The read limit pyspark's JSON {@code json} names. @throws IllegalArgumentException for another */
    static ReadLimit fromJson(String json) {
        Map<String, Object> got = Options.fromJson(json, new TypeReference<Map<String, Object>>() { });
        String type = String.valueOf(got.get("_type"));
        switch (type) {
            case "ReadAllAvailable":
                return ReadLimit.allAvailable();
            case "ReadMaxRows":
                return ReadLimit.maxRows(((Number) got.get("max_rows")).longValue());
            case "ReadMinRows":
                return ReadLimit.minRows(((Number) got.get("min_rows")).longValue(), Long.MAX_VALUE);
            case "ReadMaxBytes":
                return ReadLimit.maxBytes(((Number) got.get("max_bytes")).longValue());
            case "ReadMaxFiles":
                return ReadLimit.maxFiles(((Number) got.get("max_files")).intValue());
            default:
                throw new IllegalArgumentException("txnlog: no read limit like " + json);
        }
    }
}

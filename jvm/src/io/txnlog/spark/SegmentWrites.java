package io.txnlog.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.type.TypeReference;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.DataFrameWriter;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;

/**
 * Runs a {@link SegmentParquetFormat} write for a driver that loaded this jar at run time (in a class loader of its
 * own, which Spark's executors and Spark's data source lookup do not see), each step in one call from the driver's
 * Python process (a micro-batch pays for every call it makes).
 *
 * <p>Contract: {@link #conform} gives the rows the topic's columns; {@link #write} and {@link #save} add the jar to
 * the Spark context once (so executors load the format's writer classes), then save the rows with the format,
 * resolving it through this jar's class loader; the thread's context class loader is restored afterwards. Errors
 * are Spark's ({@link IllegalArgumentException} for a specification that is not valid JSON).
 */
public final class SegmentWrites {
    /** Save {@code writer}'s rows to {@code path} with {@link SegmentParquetFormat} (options already set). */
    public void save(DataFrameWriter<?> writer, String path) {
        Jar.ship();
        Jar.withLoader(() -> {
            writer.format(SegmentParquetFormat.class.getName()).save(path);
            return null;
        });
    }

    /**
     * Save {@code data} to {@code path} with {@link SegmentParquetFormat} and the writer options {@code optionsJson}
     * (one JSON object of strings), timestamps written as microseconds ({@code spark.sql.parquet.outputTimestampType}
     * set for the write, the session's value restored after it).
     */
    public void write(Dataset<Row> data, String optionsJson, String path) {
        Map<String, String> options = Options.fromJson(optionsJson, new TypeReference<Map<String, String>>() { });
        String key = SQLConf.PARQUET_OUTPUT_TIMESTAMP_TYPE().key();
        org.apache.spark.sql.RuntimeConfig conf = data.sparkSession().conf();
        scala.Option<String> old = conf.getOption(key);
        conf.set(key, "TIMESTAMP_MICROS");
        try {
            save(data.write().options(options), path);
        } finally {
            if (old.isDefined()) {
                conf.set(key, old.get());
            } else {
                conf.unset(key);
            }
        }
    }

    /**
     * {@code data} under the projection {@code specJson} names: a JSON object whose {@code columns} lists, in the
     * topic's order, {@code {"name", "source", "type" (the text of a Spark type's JSON), "nonNull"}}: each column
     * {@code source} cast to {@code type} as {@code name}, a {@code nonNull} source wrapped in an expression Spark
     * cannot prove non-null (so the file says optional, as the topic's columns are); and, when {@code timestamp} names
     * a column, that column as a timestamp (null: the write's time) as {@code producerColumn}.
     */
    public Dataset<Row> conform(Dataset<Row> data, String specJson) {
        Map<String, Object> spec = Options.fromJson(specJson, new TypeReference<Map<String, Object>>() { });
        List<Column> cols = new ArrayList<>();
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> columns = (List<Map<String, Object>>) spec.get("columns");
        for (Map<String, Object> c : columns) {
            Column col = functions.col(quoted((String) c.get("source")));
            if (Boolean.TRUE.equals(c.get("nonNull"))) {
                col = functions.when(functions.spark_partition_id().geq(0), col);
            }
            DataType type = DataType.fromJson((String) c.get("type"));
            cols.add(col.cast(type).alias((String) c.get("name")));
        }
        Object timestamp = spec.get("timestamp");
        if (timestamp != null) {
            cols.add(functions.coalesce(functions.col(quoted((String) timestamp)).cast("timestamp"),
                    functions.current_timestamp()).alias((String) spec.get("producerColumn")));
        }
        return data.select(cols.toArray(new Column[0]));
    }

    private static String quoted(String name) {
        return "`" + name.replace("`", "``") + "`";
    }
}

package io.txnlog.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.type.TypeReference;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation$;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Builds the native read path's scans: {@link SegmentFormat} over given paths, its columns as nullable as the read
 * schema says.
 *
 * <p>Contract: {@code load} adds the jar to the Spark context once (executors load the format's reader), reads
 * {@code files} (a JSON array of {@code [url, size]}: {@link KnownFiles}, so nothing is listed) with
 * {@link SegmentFormat}, the schema {@code schemaJson} and {@code options} (a JSON object), and returns the Dataset
 * whose columns have the schema's nullability (Spark reads a file relation's columns as nullable; the caller vouches
 * that the files hold no null in a column declared not null, and the computed columns never are). Errors are Spark's; a
 * plan that is not one file relation fails ({@link IllegalStateException}).
 *
 * <p>The file relations of the last {@link #CACHED} distinct loads (session, schema, options and paths) are kept: a
 * load equal to one of them (a query over a snapshot already planned) takes a new instance of its relation (new
 * column ids) instead of resolving it again. The files a load names are immutable segments.
 */
public final class SegmentScans {
    /** How many file relations are kept. */
    static final int CACHED = 32;

    private static final Map<List<Object>, LogicalRelation> RELATIONS =
        new LinkedHashMap<List<Object>, LogicalRelation>(16, 0.75f, true) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<List<Object>, LogicalRelation> eldest) {
                return size() > CACHED;
            }
        };

    /** A session as a key: equal only to itself. */
    private record Session(Object session) {
        @Override
        public boolean equals(Object o) {
            return o instanceof Session && ((Session) o).session == session;
        }

        @Override
        public int hashCode() {
            return System.identityHashCode(session);
        }
    }

    /**
     * The scan (see the class comment), its options given as one JSON object and its paths as one JSON array: py4j
     * would convert a map or a list with a round trip per entry.
     */
    public Dataset<Row> load(org.apache.spark.sql.classic.SparkSession session, String schemaJson,
                             String optionsJson, String filesJson) {
        Map<String, String> options = Options.fromJson(optionsJson, new TypeReference<Map<String, String>>() { });
        List<List<Object>> files = Options.fromJson(filesJson, new TypeReference<List<List<Object>>>() { });
        return load(session, schemaJson, options, files);
    }

    /**
     * A plain Parquet scan of {@code filesJson} (a JSON array of {@code [url, size]}: {@link KnownFiles}, so
     * nothing is listed) with the schema {@code schemaJson} and the options {@code optionsJson} (a JSON object),
     * filtered by the SQL condition {@code keep} (none when null) and projected to the SQL expressions of
     * {@code columnsJson} (a JSON array): what the Python side would build with a dozen py4j calls and more, in one.
     * Errors are Spark's.
     */
    public Dataset<Row> sql(org.apache.spark.sql.classic.SparkSession session, String schemaJson, String optionsJson,
                            String filesJson, String keep, String columnsJson) {
        Map<String, String> options = Options.fromJson(optionsJson, new TypeReference<Map<String, String>>() { });
        List<List<Object>> files = Options.fromJson(filesJson, new TypeReference<List<List<Object>>>() { });
        List<String> columns = Options.fromJson(columnsJson, new TypeReference<List<String>>() { });
        StructType schema = (StructType) DataType.fromJson(schemaJson);
        // one plan, analysed once (each Dataset step would analyse the whole plan again: ~10 ms a step)
        ParserInterface parser = session.sessionState().sqlParser();
        LogicalPlan plan = LogicalRelation$.MODULE$.apply(
            new KnownFiles(files).relation(session, schema, new ParquetFileFormat(), options), false);
        if (keep != null) {
            plan = new Filter(parse(parser, keep), plan);
        }
        List<NamedExpression> projected = new ArrayList<>();
        for (String c : columns) {
            Expression e = parse(parser, c);
            if (!(e instanceof NamedExpression)) {
                throw new IllegalArgumentException("txnlog: a scan column is named: " + c);
            }
            projected.add((NamedExpression) e);
        }
        plan = new Project(CollectionConverters.asScala(projected).toList(), plan);
        return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(session, plan);
    }

    /** {@code sql} parsed. @throws IllegalStateException it does not parse (the caller built it: a bug) */
    private static Expression parse(ParserInterface parser, String sql) {
        try {
            return parser.parseExpression(sql);
        } catch (org.apache.spark.sql.catalyst.parser.ParseException e) {
            throw new IllegalStateException("txnlog: a scan expression does not parse: " + sql, e);
        }
    }

    private Dataset<Row> load(org.apache.spark.sql.classic.SparkSession session, String schemaJson,
                              Map<String, String> options, List<List<Object>> files) {
        Jar.ship();
        StructType schema = (StructType) DataType.fromJson(schemaJson);
        List<Object> key = List.of(new Session(session), schemaJson, options, files);  // all parsed for this call
        LogicalPlan plan;
        synchronized (RELATIONS) {
            LogicalRelation cached = RELATIONS.get(key);
            plan = cached == null ? null : cached.newInstance();
        }
        if (plan == null) {
            Dataset<Row> read = Jar.withLoader(() -> session.baseRelationToDataFrame(
                new KnownFiles(files).relation(session, schema, new SegmentFormat(), options)));
            plan = read.queryExecution().analyzed();
            if (!(plan instanceof LogicalRelation)) {
                throw new IllegalStateException("txnlog: a segment scan planned as " + plan.nodeName());
            }
            synchronized (RELATIONS) {
                RELATIONS.put(key, (LogicalRelation) plan);
            }
        }
        Map<String, Boolean> nullable = new HashMap<>();
        for (StructField f : schema.fields()) {
            nullable.put(f.name(), f.nullable());
        }
        List<AttributeReference> output = new ArrayList<>();
        for (AttributeReference a : CollectionConverters.asJava(((LogicalRelation) plan).output())) {
            output.add(a.withNullability(nullable.getOrDefault(a.name(), true)));
        }
        Map<String, Object> changes = new HashMap<>();
        changes.put("output", CollectionConverters.asScala(output).toList());
        LogicalPlan copy = NativeWriteRule.copy(plan, changes);
        if (copy == null) {
            throw new IllegalStateException("txnlog: this Spark's file relation has no output field");
        }
        return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(session, copy);
    }
}

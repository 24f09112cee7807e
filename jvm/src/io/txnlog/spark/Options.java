package io.txnlog.spark;

import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;

import scala.Option;

/**
 * The options txnlog's file formats read from their Spark options, and options as they cross py4j: one JSON string,
 * where a map would cost a round trip per entry.
 */
final class Options {
    private Options() {
    }

    /** The value of option {@code name} (or of its lower-case form, as Spark may pass it); null when unset. */
    static String optional(scala.collection.immutable.Map<String, String> options, String name) {
        Option<String> got = options.get(name);
        if (got.isEmpty()) {
            got = options.get(name.toLowerCase(java.util.Locale.ROOT));
        }
        return got.isEmpty() ? null : got.get();
    }

    /**
     * The value of option {@code name} (or of its lower-case form, as Spark may pass it).
     *
     * @param user what needs the option, for the error ("the keyed Parquet write")
     * @throws IllegalArgumentException when neither form is set
     */
    static String required(scala.collection.immutable.Map<String, String> options, String name, String user) {
        String got = optional(options, name);
        if (got == null) {
            throw new IllegalArgumentException("txnlog: " + user + " needs the option " + name);
        }
        return got;
    }

    /** {@code options} (strings, numbers) as one JSON object. */
    static String toJson(Map<String, ?> options) {
        try {
            return new ObjectMapper().writeValueAsString(options);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("txnlog: options cannot be encoded", e);
        }
    }

    /**
     * The value of {@code json} (what {@link #toJson} or Python's {@code json.dumps} wrote), as {@code type}.
     *
     * @throws IllegalArgumentException when it is not valid JSON of that type
     */
    static <T> T fromJson(String json, TypeReference<T> type) {
        try {
            return new ObjectMapper().readValue(json, type);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("txnlog: invalid JSON from the driver's Python process", e);
        }
    }
}

package io.txnlog.spark;

import scala.Option;

/** The options txnlog's file formats read from their Spark options. */
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
}

package horovod.rs.examples;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import horovod.rs.spark.HorovodRunOptions;
import horovod.rs.spark.HorovodRunner;
import horovod.rs.spark.NativeTable;
import horovod.rs.spark.ml.HorovodEstimator;
import horovod.rs.spark.ml.HorovodModel;
import horovod.rs.spark.ml.ModelSpec;
import horovod.rs.spark.shim.SparkShim;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * {@code make bench-ingest}: how fast a DataFrame reaches the trainer's tensors on every rank.
 *
 * <ul>
 * The DataFrame is cached with one partition per rank, so neither path pays for a shuffle and the
 * figures compare the data paths alone:
 * <ul>
 *   <li>{@code arrow-direct}: what {@code HorovodEstimator.fit} does: each rank's rows go into
 *       Arrow batches and are copied into its native table.
 *   <li>{@code parquet-roundtrip}: what Horovod's estimators do: {@code prepare_data} writes the
 *       DataFrame as Parquet, then each rank reads its files into
 *       tensors, as Petastorm's reader does (here a native reader built on arrow-rs, one process
 *       per rank, reading into the same f32 table).
 *   <li>{@code train}: samples/s of the Rossmann model (examples/rossmann) fitted by the
 *       estimator on the same data, for a fixed number of steps.
 * </ul>
 *
 * {@code spark-scan} (the floor: the same barrier stage reading every row and keeping none) and
 * {@code arrow-direct} run in turn {@code repeats} times, since one run of either varies more
 * than they differ; a {@code -median} line of each follows.
 *
 * Arguments: rows, ranks, the Parquet reader binary, the Rossmann model spec file, and optionally
 * the repeats (5). Prints CSV {@code path,rows,columns,seconds,rows_per_s}.
 */
public final class IngestBenchmark {
    private static final int CATEGORICAL = 18;
    private static final int CONTINUOUS = 18;

    private IngestBenchmark() {}

    public static void main(String[] args) throws Exception {
        long rows = Long.parseLong(args[0]);
        int ranks = Integer.parseInt(args[1]);
        String parquetReader = args[2];
        String rossmannSpec = Files.readString(Path.of(args[3]));
        int repeats = args.length > 4 ? Integer.parseInt(args[4]) : 5;
        SparkSession spark = SparkSession.builder().appName("horovod-rs ingest benchmark").getOrCreate();
        try {
            Dataset<Row> data = rossmannLike(spark, rossmannSpec, rows).repartition(ranks).cache();
            data.count();
            List<String> columns = Arrays.asList(data.columns());
            List<String> out = new ArrayList<>();
            out.add("path,rows,columns,seconds,rows_per_s");
            // A first, untimed pass warms the JIT and the executors' native library.
            arrowDirect(data.limit(10_000), ranks, columns);
            List<Timed> scans = new ArrayList<>();
            List<Timed> arrows = new ArrayList<>();
            for (int round = 0; round < repeats; round++) {
                scans.add(scanOnly(data, ranks, columns));
                arrows.add(arrowDirect(data, ranks, columns));
            }
            scans.forEach(s -> out.add(s.csv()));
            arrows.forEach(a -> out.add(a.csv()));
            out.add(median("spark-scan-median", scans));
            out.add(median("arrow-direct-median", arrows));
            out.add(parquetRoundtrip(data, ranks, parquetReader));
            out.add(train(data, ranks, rossmannSpec));
            out.forEach(System.out::println);
        } finally {
            spark.stop();
        }
    }

    /** 18 categorical int columns (the Rossmann vocabularies), 18 continuous doubles, a label. */
    static Dataset<Row> rossmannLike(SparkSession spark, String spec, long rows) throws IOException {
        JsonNode inputs = new ObjectMapper().readTree(spec).get("inputs");
        List<String> expressions = new ArrayList<>();
        int seed = 1;
        for (JsonNode input : inputs) {
            if (input.get("type").asText().equals("categorical")) {
                expressions.add("CAST(floor(rand(" + seed++ + ") * " + input.get("vocabulary").asInt() + ") AS INT) AS "
                        + input.get("columns").get(0).asText());
            } else {
                for (JsonNode column : input.get("columns")) {
                    expressions.add("randn(" + seed++ + ") AS " + column.asText());
                }
            }
        }
        expressions.add("8 + rand(" + seed + ") AS Sales");
        if (expressions.size() != CATEGORICAL + CONTINUOUS + 1) {
            throw new IllegalStateException("the Rossmann spec should read 36 columns, got " + (expressions.size() - 1));
        }
        return spark.range(0, rows, 1, 8).selectExpr(expressions.toArray(String[]::new));
    }

    static Timed arrowDirect(Dataset<Row> data, int ranks, List<String> columns) {
        long start = System.nanoTime();
        Dataset<Row> partitioned = data;
        var rdd = SparkShim.internalRows(partitioned);
        var schema = partitioned.schema();
        List<Long> counts = HorovodRunner.runOnPartitions(rdd, (ctx, partition) -> {
            try (NativeTable table = NativeTable.fromRows(partition, schema, columns, List.of("Sales"), false,
                    Long.MAX_VALUE)) {
                return table.rows();
            }
        }, HorovodRunOptions.fromConf(data.sparkSession().sparkContext().getConf()), "horovod-rs: ingest benchmark");
        return Timed.since("arrow-direct", counts.stream().mapToLong(Long::longValue).sum(), columns.size(), start);
    }

    /**
     * The floor under arrow-direct: the same barrier stage reading every value of every row
     * (summing them, so that none is skipped), keeping none.
     */
    static Timed scanOnly(Dataset<Row> data, int ranks, List<String> columns) {
        long start = System.nanoTime();
        var rdd = SparkShim.internalRows(data);
        int width = columns.size();
        boolean[] integral = new boolean[width];
        for (int c = 0; c < width; c++) {
            integral[c] = data.schema().fields()[c].dataType() instanceof org.apache.spark.sql.types.IntegerType;
        }
        List<Long> counts = HorovodRunner.runOnPartitions(rdd, (ctx, partition) -> {
            long n = 0;
            double sum = 0;
            while (partition.hasNext()) {
                var row = partition.next();
                for (int c = 0; c < width; c++) {
                    if (!row.isNullAt(c)) {
                        sum += integral[c] ? row.getInt(c) : row.getDouble(c);
                    }
                }
                n++;
            }
            return Double.isNaN(sum) ? -n : n;
        }, HorovodRunOptions.fromConf(data.sparkSession().sparkContext().getConf()), "horovod-rs: scan benchmark");
        return Timed.since("spark-scan", counts.stream().mapToLong(Long::longValue).sum(), columns.size(), start);
    }

    static String parquetRoundtrip(Dataset<Row> data, int ranks, String reader) throws Exception {
        Path dir = Files.createTempDirectory("horovod-rs-bench-parquet");
        long start = System.nanoTime();
        data.write().mode("overwrite").parquet(dir.resolve("train").toString());
        List<String> files;
        try (Stream<Path> listing = Files.list(dir.resolve("train"))) {
            files = listing.map(Path::toString).filter(f -> f.endsWith(".parquet")).sorted().collect(Collectors.toList());
        }
        List<Process> readers = new ArrayList<>();
        for (int rank = 0; rank < ranks; rank++) {
            List<String> command = new ArrayList<>(List.of(reader));
            for (int f = rank; f < files.size(); f += ranks) {
                command.add(files.get(f));
            }
            readers.add(new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start());
        }
        long total = 0;
        for (Process process : readers) {
            try (BufferedReader out = new BufferedReader(
                    new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                total += Long.parseLong(out.readLine().split(",")[0]);
            }
            if (process.waitFor() != 0) {
                throw new IllegalStateException("the Parquet reader failed");
            }
        }
        String line = Timed.since("parquet-roundtrip", total, data.columns().length, start).csv();
        deleteRecursively(dir.toFile());
        return line;
    }

    static String train(Dataset<Row> data, int ranks, String spec) {
        HorovodModel model = new HorovodEstimator().setModelSpec(ModelSpec.fromJson(spec))
                .setLabelCols(new String[] {"Sales"}).setNumProc(ranks).setLoss("mae")
                .setOptimizer("adam").setLearningRate(1e-4).setEpsilon(1e-3)
                .setBatchSize(256).setEpochs(1).setTrainStepsPerEpoch(20).setVerbose(0)
                .fit(data.limit(100_000));
        var epoch = model.getHistory().get(0);
        long samples = 20L * 256 * ranks;
        return new Timed("train", samples, data.columns().length - 1, samples / epoch.get("samples_per_second")).csv();
    }

    /** One timed pass: its CSV line {@code path,rows,columns,seconds,rows_per_s}. */
    record Timed(String path, long rows, int columns, double seconds) {
        static Timed since(String path, long rows, int columns, long startNanos) {
            return new Timed(path, rows, columns, (System.nanoTime() - startNanos) / 1e9);
        }

        String csv() {
            return String.format(Locale.ROOT, "%s,%d,%d,%.3f,%.0f", path, rows, columns, seconds, rows / seconds);
        }
    }

    /** The median pass of {@code passes} (of one path), as a CSV line named {@code path}. */
    static String median(String path, List<Timed> passes) {
        List<Timed> sorted = new ArrayList<>(passes);
        sorted.sort(java.util.Comparator.comparingDouble(Timed::seconds));
        Timed middle = sorted.get(sorted.size() / 2);
        return new Timed(path, middle.rows(), middle.columns(), middle.seconds()).csv();
    }

    private static void deleteRecursively(File file) {
        File[] children = file.listFiles();
        if (children != null) {
            for (File child : children) {
                deleteRecursively(child);
            }
        }
        file.delete();
    }
}

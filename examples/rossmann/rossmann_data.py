"""The Rossmann tutorial's data preparation, shared by the Keras, PyTorch and Flyte examples: the
seven CSV files joined into one row per store and day, elapsed-time features around promotions and
holidays, categorical columns mapped to vocabulary indices, the 2014 period matching the test
period marked as validation, and sales in the log domain. This is the preparation of Horovod's
``keras_spark_rossmann_estimator.py`` (which took it from fast.ai), step by step.

``find_or_generate_data`` picks the input: a directory holding Kaggle's real files, or files with
the same schemas written by ``generate_data.py``.
"""

import datetime
import os
from dataclasses import dataclass

import numpy as np
import pyspark.sql.functions as F
import pyspark.sql.types as T
from pyspark import Row

FILES = ["train.csv", "test.csv", "store.csv", "store_states.csv", "state_names.csv", "googletrend.csv",
         "weather.csv"]

CATEGORICAL_COLS = [
    'Store', 'State', 'DayOfWeek', 'Year', 'Month', 'Day', 'Week', 'CompetitionMonthsOpen', 'Promo2Weeks', 'StoreType',
    'Assortment', 'PromoInterval', 'CompetitionOpenSinceYear', 'Promo2SinceYear', 'Events', 'Promo',
    'StateHoliday', 'SchoolHoliday'
]
CONTINUOUS_COLS = [
    'CompetitionDistance', 'Max_TemperatureC', 'Mean_TemperatureC', 'Min_TemperatureC', 'Max_Humidity',
    'Mean_Humidity', 'Min_Humidity', 'Max_Wind_SpeedKm_h', 'Mean_Wind_SpeedKm_h', 'CloudCover', 'trend', 'trend_de',
    'BeforePromo', 'AfterPromo', 'AfterStateHoliday', 'BeforeStateHoliday', 'BeforeSchoolHoliday', 'AfterSchoolHoliday'
]
ALL_COLS = CATEGORICAL_COLS + CONTINUOUS_COLS


def find_or_generate_data(data_dir, work_dir, stores, seed=42):
    """The directory to read: ``data_dir`` when given (it must hold the seven files), else
    ``work_dir/rossmann-data-<stores>`` filled by the generator (once)."""
    if data_dir:
        local = data_dir[len("file://"):] if data_dir.startswith("file://") else data_dir
        if "://" not in local:
            missing = [f for f in FILES if not os.path.exists(os.path.join(local, f))]
            if missing:
                raise SystemExit("--data-dir %s lacks %s: give a directory with Kaggle's Rossmann files (and "
                                 "fast.ai's store_states, state_names, googletrend, weather), or leave --data-dir "
                                 "out to generate files" % (data_dir, ", ".join(missing)))
        return data_dir
    import generate_data

    target = os.path.join(work_dir, "rossmann-data-%d-%d" % (stores, seed))
    if not all(os.path.exists(os.path.join(target, f)) for f in FILES):
        print("Generating Rossmann files for %d stores into %s" % (stores, target))
        generate_data.generate(target, stores, seed)
    return target


@dataclass
class Prepared:
    """The tutorial's prepared data: feature columns (categoricals as vocabulary indices), ``Sales``
    in the log domain and ``Validation`` in ``train_df``; ``Id`` in ``test_df``."""

    train_df: object
    test_df: object
    vocab: dict
    max_sales: float


def prepare(spark, data_dir, sample_rate=None):
    """Reads the seven files from ``data_dir`` (any URI Spark reads) and prepares them."""
    # The executors run this module's functions (the elapsed-time pass, the vocabulary lookups).
    spark.sparkContext.addPyFile(os.path.abspath(__file__))

    def read(name):
        return spark.read.csv('%s/%s' % (data_dir, name), header=True)

    train_csv, test_csv = read('train.csv'), read('test.csv')
    tables = {name: read(name + '.csv') for name in ('store', 'store_states', 'state_names', 'googletrend',
                                                      'weather')}
    if sample_rate:
        train_csv = train_csv.sample(withReplacement=False, fraction=sample_rate, seed=1)
        test_csv = test_csv.sample(withReplacement=False, fraction=sample_rate, seed=1)

    # Prepare data frames from CSV files.
    train_df = prepare_df(train_csv, tables).cache()
    test_df = prepare_df(test_csv, tables).cache()

    # Add elapsed times from holidays & promos, the data spanning training & test datasets.
    elapsed_cols = ['Promo', 'StateHoliday', 'SchoolHoliday']
    elapsed = add_elapsed(train_df.select('Date', 'Store', *elapsed_cols)
                          .unionAll(test_df.select('Date', 'Store', *elapsed_cols)),
                          elapsed_cols)

    # Join with elapsed times.
    elapsed_names = [prefix + col for prefix in ['Before', 'After'] for col in elapsed_cols]
    train_df = train_df.join(elapsed, ['Date', 'Store']).select(train_df['*'], *elapsed_names)
    test_df = test_df.join(elapsed, ['Date', 'Store']).select(test_df['*'], *elapsed_names)

    # Filter out zero sales.
    train_df = train_df.filter(train_df.Sales > 0)

    # Select features.
    train_df = train_df.select(*(ALL_COLS + ['Sales', 'Date'])).cache()
    test_df = test_df.select(*(ALL_COLS + ['Id', 'Date'])).cache()

    # Build vocabulary of categorical columns.
    vocab = build_vocabulary(train_df.select(*CATEGORICAL_COLS)
                             .unionAll(test_df.select(*CATEGORICAL_COLS)).cache(),
                             CATEGORICAL_COLS)

    # Cast continuous columns to float & lookup categorical columns.
    train_df = cast_columns(train_df, CONTINUOUS_COLS + ['Sales'])
    train_df = lookup_columns(train_df, vocab)
    test_df = cast_columns(test_df, CONTINUOUS_COLS)
    test_df = lookup_columns(test_df, vocab)

    # Split into training & validation.
    # Test set is in 2015, use the same period in 2014 from the training set as a validation set.
    test_min_date = test_df.agg(F.min(test_df.Date)).collect()[0][0]
    test_max_date = test_df.agg(F.max(test_df.Date)).collect()[0][0]
    one_year = datetime.timedelta(365)
    train_df = train_df.withColumn('Validation', (train_df.Date > test_min_date - one_year)
                                   & (train_df.Date <= test_max_date - one_year))

    # Determine max Sales number.
    max_sales = train_df.agg(F.max(train_df.Sales)).collect()[0][0]

    # Convert Sales to log domain
    train_df = train_df.withColumn('Sales', F.log(train_df.Sales))
    return Prepared(train_df, test_df, vocab, max_sales)


def expand_date(df):
    df = df.withColumn('Date', df.Date.cast(T.DateType()))
    return df \
        .withColumn('Year', F.year(df.Date)) \
        .withColumn('Month', F.month(df.Date)) \
        .withColumn('Week', F.weekofyear(df.Date)) \
        .withColumn('Day', F.dayofmonth(df.Date))


def prepare_google_trend(google_trend_csv):
    # Extract week start date and state.
    google_trend_all = google_trend_csv \
        .withColumn('Date', F.regexp_extract(google_trend_csv.week, '(.*?) -', 1)) \
        .withColumn('State', F.regexp_extract(google_trend_csv.file, 'Rossmann_DE_(.*)', 1))

    # Map state NI -> HB,NI to align with other data sources.
    google_trend_all = google_trend_all \
        .withColumn('State', F.when(google_trend_all.State == 'NI', 'HB,NI').otherwise(google_trend_all.State))

    # Expand dates.
    return expand_date(google_trend_all)


def add_elapsed(df, cols):
    """Days since (``After<col>``) and until (``Before<col>``, negative) the store's last and next
    day with ``col`` set: one ordered pass per direction over each store's days."""
    def add_elapsed_column(col, asc):
        def fn(rows):
            last_store, last_date = None, None
            for r in rows:
                if last_store != r.Store:
                    last_store = r.Store
                    last_date = r.Date
                if r[col]:
                    last_date = r.Date
                fields = r.asDict().copy()
                fields[('After' if asc else 'Before') + col] = (r.Date - last_date).days
                yield Row(**fields)
        return fn

    df = df.repartition(df.Store)
    for asc in [False, True]:
        sort_col = df.Date.asc() if asc else df.Date.desc()
        rdd = df.sortWithinPartitions(df.Store.asc(), sort_col).rdd
        for col in cols:
            rdd = rdd.mapPartitions(add_elapsed_column(col, asc))
        df = rdd.toDF()
    return df


def prepare_df(df, tables):
    num_rows = df.count()

    # Expand dates.
    df = expand_date(df)

    df = df \
        .withColumn('Open', df.Open != '0') \
        .withColumn('Promo', df.Promo != '0') \
        .withColumn('StateHoliday', df.StateHoliday != '0') \
        .withColumn('SchoolHoliday', df.SchoolHoliday != '0')

    # Merge in store information.
    store = tables['store'].join(tables['store_states'], 'Store')
    df = df.join(store, 'Store')

    # Merge in Google Trend information.
    google_trend_all = prepare_google_trend(tables['googletrend'])
    df = df.join(google_trend_all, ['State', 'Year', 'Week']).select(df['*'], google_trend_all.trend)

    # Merge in Google Trend for whole Germany.
    google_trend_de = google_trend_all[google_trend_all.file == 'Rossmann_DE'].withColumnRenamed('trend', 'trend_de')
    df = df.join(google_trend_de, ['Year', 'Week']).select(df['*'], google_trend_de.trend_de)

    # Merge in weather.
    weather_csv, state_names_csv = tables['weather'], tables['state_names']
    weather = weather_csv.join(state_names_csv, weather_csv.file == state_names_csv.StateName)
    df = df.join(weather, ['State', 'Date'])

    # Fix null values.
    df = df \
        .withColumn('CompetitionOpenSinceYear', F.coalesce(df.CompetitionOpenSinceYear, F.lit(1900))) \
        .withColumn('CompetitionOpenSinceMonth', F.coalesce(df.CompetitionOpenSinceMonth, F.lit(1))) \
        .withColumn('Promo2SinceYear', F.coalesce(df.Promo2SinceYear, F.lit(1900))) \
        .withColumn('Promo2SinceWeek', F.coalesce(df.Promo2SinceWeek, F.lit(1)))

    # Days & months competition was open, cap to 2 years.
    df = df.withColumn('CompetitionOpenSince',
                       F.to_date(F.format_string('%s-%s-15', df.CompetitionOpenSinceYear,
                                                 df.CompetitionOpenSinceMonth)))
    df = df.withColumn('CompetitionDaysOpen',
                       F.when(df.CompetitionOpenSinceYear > 1900,
                              F.greatest(F.lit(0),
                                         F.least(F.lit(360 * 2), F.datediff(df.Date, df.CompetitionOpenSince))))
                       .otherwise(0))
    df = df.withColumn('CompetitionMonthsOpen', (df.CompetitionDaysOpen / 30).cast(T.IntegerType()))

    # Days & weeks of promotion, cap to 25 weeks.
    df = df.withColumn('Promo2Since', F.expr('date_add(format_string("%s-01-01", Promo2SinceYear), '
                                             '(cast(Promo2SinceWeek as int) - 1) * 7)'))
    df = df.withColumn('Promo2Days',
                       F.when(df.Promo2SinceYear > 1900,
                              F.greatest(F.lit(0), F.least(F.lit(25 * 7), F.datediff(df.Date, df.Promo2Since))))
                       .otherwise(0))
    df = df.withColumn('Promo2Weeks', (df.Promo2Days / 7).cast(T.IntegerType()))

    # Check that we did not lose any rows through inner joins.
    assert num_rows == df.count(), 'lost rows in joins'
    return df


def build_vocabulary(df, cols):
    vocab = {}
    for col in cols:
        values = [r[0] for r in df.select(col).distinct().collect()]
        col_type = type([x for x in values if x is not None][0])
        default_value = col_type()
        vocab[col] = sorted(values, key=lambda x: x or default_value)
    return vocab


def cast_columns(df, cols):
    for col in cols:
        df = df.withColumn(col, F.coalesce(df[col].cast(T.FloatType()), F.lit(0.0)))
    return df


def lookup_columns(df, vocab):
    def lookup(mapping):
        def fn(v):
            return mapping.index(v)
        return F.udf(fn, returnType=T.IntegerType())

    for col, mapping in vocab.items():
        df = df.withColumn(col, lookup(mapping)(df[col]))
    return df


def show_sizes(prepared):
    """Prints the sizes of the training, validation and test sets (as the tutorial does)."""
    train_df = prepared.train_df
    print('Training: %d' % train_df.filter(~train_df.Validation).count())
    print('Validation: %d' % train_df.filter(train_df.Validation).count())
    print('Test: %d' % prepared.test_df.count())


def rmspe(df, actual, predicted):
    """Root mean square percentage error of ``predicted`` against ``actual`` (both in real Sales,
    rows with zero ``actual`` left out), the competition's metric, computed in Spark."""
    row = df.filter(F.col(actual) > 0) \
        .agg(F.sqrt(F.avg(F.pow((F.col(actual) - F.col(predicted)) / F.col(actual), 2)))).first()
    return row[0]


def store_median_rmspe(train_df):
    """The RMSPE on the validation rows of predicting each store's median training sales: the
    baseline a model must beat to have learned more than each store's level."""
    log_sales = train_df.select('Store', 'Sales', 'Validation')
    medians = log_sales.filter(~log_sales.Validation).groupBy('Store') \
        .agg(F.expr('percentile_approx(Sales, 0.5)').alias('median_log_sales'))
    validation = log_sales.filter(log_sales.Validation).join(medians, 'Store')
    return rmspe(validation.select(F.exp('Sales').alias('actual'), F.exp('median_log_sales').alias('predicted')),
                 'actual', 'predicted')


def evaluate(model, train_df):
    """``(rmspe, baseline)``: the RMSPE of a trained Horovod Model (output column ``Sales_output``,
    log sales) on the validation rows, predicted through ``transform``, and the store-median
    baseline's."""
    validation = model.transform(train_df.filter(train_df.Validation))
    validation = validation.select(F.exp('Sales').alias('actual'), F.exp('Sales_output').alias('predicted'))
    return rmspe(validation, 'actual', 'predicted'), store_median_rmspe(train_df)


def write_submission(model, test_df, path):
    """The tutorial's final prediction: ``transform`` on the test rows, sales back from the log
    domain, ``Id,Sales_pred`` sorted by Id into the CSV file ``path``; returns its row count."""
    pred_df = model.transform(test_df)
    pred_df.printSchema()
    pred_df.show(5)

    # Convert from log domain to real Sales numbers
    pred_df = pred_df.withColumn('Sales_pred', F.exp(pred_df.Sales_output))

    submission_df = pred_df.select(pred_df.Id.cast(T.IntegerType()), pred_df.Sales_pred).toPandas()
    if len(submission_df) != test_df.count():
        raise ValueError('%d predictions for %d test rows' % (len(submission_df), test_df.count()))
    finite = np.isfinite(submission_df.Sales_pred.to_numpy(dtype=float))
    if not finite.all():
        raise ValueError('%d of the %d predictions are not finite numbers' % ((~finite).sum(), len(finite)))
    submission_df.sort_values(by=['Id']).to_csv(path, index=False)
    print('Saved predictions to %s' % path)
    return len(submission_df)

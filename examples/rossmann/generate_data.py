"""Writes the seven CSV files of Kaggle's Rossmann Store Sales competition (with the external data
fast.ai added: store states, state names, Google Trends, weather) in their real schemas, filled with
generated values, so the Rossmann examples run where the real files cannot be had.

    python examples/rossmann/generate_data.py --stores 60 --output build/rossmann-data

The values are plausible and learnable: a store's sales follow its own level, the day of the week,
promotions, the season (December, paydays), the days around state holidays (closed on the day,
busier before and after), school holidays, a new competitor, the weather and a slow growth, times
log-normal noise of ``NOISE_SIGMA``. Dates, stores, states and holidays are laid out as in the real
files: training days 2013-01-01..2015-07-31 and test days 2015-08-01..2015-09-17, both newest
first; Sundays closed except for store type ``b``; the test file covers about 3/4 of the stores.
The same arguments write the same files.
"""

import argparse
import csv
import datetime
import math
import os

import numpy as np

TRAIN_DAYS = (datetime.date(2013, 1, 1), datetime.date(2015, 7, 31))
TEST_DAYS = (datetime.date(2015, 8, 1), datetime.date(2015, 9, 17))
REAL_STORE_COUNT = 1115

# Standard deviation of the sales' log-normal noise: the best possible RMSPE is about this.
NOISE_SIGMA = 0.07

# The 12 states of the real store_states.csv ("HB,NI": Bremen and Lower Saxony share one Google
# Trends series), and the 16 of state_names.csv (weather.csv names its files by these names).
STORE_STATES = ["NW", "BY", "SH", "HE", "TH", "BE", "SN", "HB,NI", "BW", "RP", "ST", "HH"]
STATE_NAMES = [
    ("BadenWuerttemberg", "BW"), ("Bayern", "BY"), ("Berlin", "BE"), ("Brandenburg", "BB"), ("Bremen", "HB"),
    ("Hamburg", "HH"), ("Hessen", "HE"), ("MecklenburgVorpommern", "MV"), ("Niedersachsen", "HB,NI"),
    ("NordrheinWestfalen", "NW"), ("RheinlandPfalz", "RP"), ("Saarland", "SL"), ("Sachsen", "SN"),
    ("SachsenAnhalt", "ST"), ("SchleswigHolstein", "SH"), ("Thueringen", "TH"),
]
# Google Trends series: Germany and 13 states (NI stands for "HB,NI").
TREND_STATES = ["BE", "BW", "BY", "HE", "HH", "NI", "NW", "RP", "SH", "SL", "SN", "ST", "TH"]
PROMO_INTERVALS = ["Jan,Apr,Jul,Oct", "Feb,May,Aug,Nov", "Mar,Jun,Sept,Dec"]
MONTH_NAMES = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sept", "Oct", "Nov", "Dec"]
WEATHER_COLUMNS = [
    "file", "Date", "Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Dew_PointC", "MeanDew_PointC",
    "Min_DewpointC", "Max_Humidity", "Mean_Humidity", "Min_Humidity", "Max_Sea_Level_PressurehPa",
    "Mean_Sea_Level_PressurehPa", "Min_Sea_Level_PressurehPa", "Max_VisibilityKm", "Mean_VisibilityKm",
    "Min_VisibilitykM", "Max_Wind_SpeedKm_h", "Mean_Wind_SpeedKm_h", "Max_Gust_SpeedKm_h", "Precipitationmm",
    "CloudCover", "Events", "WindDirDegrees",
]
# Log-sales effect of each day of the week, Monday first (Sunday: the few stores open then).
WEEKDAY_EFFECT = np.array([0.20, 0.06, 0.02, 0.0, 0.05, -0.12, 0.10])


def easter(year):
    """Easter Sunday (the Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = b // 4, b % 4
    g = (b - (b + 8) // 25 + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = c // 4, c % 4
    m = (a + 11 * h + 22 * ((32 + 2 * e + 2 * i - h - k) % 7)) // 451
    month, day = divmod(h + (32 + 2 * e + 2 * i - h - k) % 7 - 7 * m + 114, 31)
    return datetime.date(year, month, day + 1)


def state_holidays(year, state):
    """``{date: type}`` of one state's public holidays: a (public), b (Easter), c (Christmas)."""
    e = easter(year)
    days = {datetime.date(year, 1, 1): "a", e - datetime.timedelta(2): "b", e + datetime.timedelta(1): "b",
            datetime.date(year, 5, 1): "a", e + datetime.timedelta(39): "a", e + datetime.timedelta(50): "a",
            datetime.date(year, 10, 3): "a", datetime.date(year, 12, 25): "c", datetime.date(year, 12, 26): "c"}
    regional = [((1, 6), {"BW", "BY", "ST"}), ((11, 1), {"BW", "BY", "NW", "RP", "SL"}),
                ((10, 31), {"SN", "ST", "TH", "BB", "MV"}), ((8, 15), {"SL"})]
    for (month, day), states in regional:
        if state in states:
            days[datetime.date(year, month, day)] = "a"
    if state in {"BW", "BY", "HE", "NW", "RP", "SL"}:
        days[e + datetime.timedelta(60)] = "a"  # Corpus Christi
    return days


def school_holidays(year, state_index, state):
    """One state's school holidays in ``year``: Christmas, Easter, summer (staggered by state), autumn."""
    e = easter(year)
    spans = [(datetime.date(year, 1, 1), datetime.date(year, 1, 5)),
             (datetime.date(year, 12, 22), datetime.date(year, 12, 31)),
             (e - datetime.timedelta(6), e + datetime.timedelta(8))]
    summer = datetime.date(year, 6, 22) + datetime.timedelta(7 * ((state_index * 5 + year) % 7))
    spans.append((summer, summer + datetime.timedelta(43)))
    autumn = datetime.date(year, 10, 5) + datetime.timedelta(7 * ((state_index + year) % 3))
    spans.append((autumn, autumn + datetime.timedelta(11 if state_index % 2 else 6)))
    if state in ("BY", "BW"):
        whit = e + datetime.timedelta(50)
        spans.append((whit, whit + datetime.timedelta(11)))
    return spans


def day_range(first, last):
    return [first + datetime.timedelta(i) for i in range((last - first).days + 1)]


class Calendar:
    """Per (state, day): public holiday type, school holiday, and the sales effect of the days
    before and after a closing holiday."""

    def __init__(self, days, states):
        self.days = days
        index = {d: i for i, d in enumerate(days)}
        years = sorted({d.year for d in days} | {days[-1].year + 1})
        n = len(days)
        self.holiday = {}  # state -> array of '0', 'a', 'b', 'c'
        self.school = {}
        self.around = {}  # state -> log-sales effect of nearby closing holidays
        for s_index, state in enumerate(states):
            code = state.split(",")[-1]
            holiday = np.full(n, "0", dtype="<U1")
            school = np.zeros(n, dtype=np.int8)
            for year in years:
                for day, kind in state_holidays(year, code).items():
                    if day in index:
                        holiday[index[day]] = kind
                for first, last in school_holidays(year, s_index, code):
                    for day in day_range(first, last):
                        if day in index:
                            school[index[day]] = 1
            school[holiday != "0"] = 1
            closed = holiday != "0"
            around = np.zeros(n)
            for i in np.flatnonzero(closed):
                for offset, effect in ((-2, 0.06), (-1, 0.16), (1, 0.10), (2, 0.04)):
                    j = i + offset
                    if 0 <= j < n and not closed[j]:
                        around[j] = max(around[j], effect)
            self.holiday[state], self.school[state], self.around[state] = holiday, school, around


def seasonal_effect(days):
    """Log-sales effect of the date: the Christmas run-up, January's lull, paydays, a slow growth."""
    doy = np.array([d.timetuple().tm_yday for d in days])
    month = np.array([d.month for d in days])
    dom = np.array([d.day for d in days])
    years = np.array([(d - TRAIN_DAYS[0]).days / 365.25 for d in days])
    effect = 0.05 * np.sin(2 * math.pi * (doy - 80) / 365.25) + 0.03 * years
    effect += np.where(month == 12, 0.12 + 0.18 * np.clip((dom - 1) / 22, 0, 1) * (dom <= 24), 0.0)
    effect += np.where(month == 1, -0.08, 0.0)
    effect += np.where((dom <= 3) | (dom >= 29), 0.05, 0.0)
    return effect


class Stores:
    """The stores' fixed attributes (store.csv and store_states.csv) and their sales levels."""

    def __init__(self, rng, count):
        self.ids = np.arange(1, count + 1)
        self.type = rng.choice(list("abcd"), size=count, p=[0.54, 0.02, 0.13, 0.31])
        self.assortment = np.where(self.type == "b", rng.choice(list("abc"), size=count, p=[0.3, 0.6, 0.1]),
                                   rng.choice(list("ac"), size=count, p=[0.53, 0.47]))
        self.state = rng.choice(STORE_STATES, size=count,
                                p=np.array([25, 15, 10, 10, 8, 9, 8, 11, 9, 4, 5, 3]) / 117)
        self.distance = np.round(np.exp(rng.normal(7.6, 1.3, count)) / 10) * 10
        self.distance[rng.random(count) < 0.003] = np.nan
        has_since = rng.random(count) < 0.68
        self.competition_year = np.where(has_since, rng.choice(np.arange(1990, 2016), size=count,
                                                               p=_recent_weights(26)), 0)
        self.competition_month = np.where(has_since, rng.integers(1, 13, count), 0)
        self.promo2 = rng.random(count) < 0.51
        self.promo2_year = np.where(self.promo2, rng.integers(2009, 2016, count), 0)
        self.promo2_week = np.where(self.promo2, rng.integers(1, 51, count), 0)
        self.promo_interval = np.where(self.promo2, rng.choice(PROMO_INTERVALS, size=count, p=[0.6, 0.25, 0.15]), "")
        self.sunday_open = (self.type == "b") | (rng.random(count) < 0.02)
        level = rng.normal(math.log(5300), 0.33, count)
        level += np.select([self.type == "b", self.type == "c"], [0.45, 0.03], 0.0)
        level += np.where(self.assortment == "c", 0.06, 0.0)
        level -= np.where(np.nan_to_num(self.distance, nan=1e5) < 1000, 0.08, 0.0)  # a competitor next door
        self.level = level
        self.promo_lift = rng.normal(0.30, 0.06, count)  # some stores gain more from a promotion
        self.saturday = np.where(self.type == "d", -0.10, 0.0)  # ... or lose more on Saturdays
        self.basket = rng.normal(9.5, 1.5, count).clip(5, 16)

    def competition_opened(self, count):
        """The day each store's competitor opened (None: unknown or none)."""
        return [datetime.date(int(y), int(m), 15) if y else None
                for y, m in zip(self.competition_year[:count], self.competition_month[:count])]


def _recent_weights(n):
    w = np.exp(np.linspace(-3, 0, n))
    return w / w.sum()


class Weather:
    """Daily weather per state (all 16 states, as weather.csv): seasonal temperature with a few
    days' persistence, humidity, pressure, wind, clouds, rain and the ``Events`` they make."""

    def __init__(self, rng, days):
        n = len(days)
        doy = np.array([d.timetuple().tm_yday for d in days])
        self.rows = {}
        for name, _ in STATE_NAMES:
            offset = rng.normal(0, 1.2)
            noise = np.zeros(n)
            shocks = rng.normal(0, 2.2, n)
            for i in range(1, n):
                noise[i] = 0.75 * noise[i - 1] + shocks[i]
            mean = 9.5 + 9.5 * np.sin(2 * math.pi * (doy - 105) / 365.25) + offset + noise
            rain = rng.random(n) < 0.38 + 0.08 * np.cos(2 * math.pi * doy / 365.25)
            precipitation = np.where(rain, rng.gamma(1.2, 3.0, n), 0.0)
            humidity = np.clip(78 + 10 * np.cos(2 * math.pi * doy / 365.25) + 8 * rain + rng.normal(0, 6, n), 35, 100)
            cloud = np.clip(np.round(4 + 3 * rain + rng.normal(0, 1.6, n)), 0, 8)
            wind = np.clip(rng.gamma(3.0, 4.0, n), 2, 60)
            fog = (humidity > 93) & (rng.random(n) < 0.5)
            storm = rain & (mean > 17) & (rng.random(n) < 0.3)
            snow = rain & (mean < 1.5)
            self.rows[name] = dict(mean=mean, rain=rain, precipitation=precipitation, humidity=humidity, cloud=cloud,
                                   wind=wind, fog=fog, storm=storm, snow=snow,
                                   spread=rng.uniform(3, 7, n), pressure=rng.normal(1016, 8, n),
                                   gust=np.where(rng.random(n) < 0.35, np.nan, wind + rng.uniform(10, 30, n)),
                                   visibility=np.clip(rng.normal(14, 6, n) - 8 * fog, 1, 31),
                                   direction=rng.integers(0, 361, n), cloud_missing=rng.random(n) < 0.02)

    def events(self, name):
        w = self.rows[name]
        parts = [("Fog", w["fog"]), ("Rain", w["rain"] & ~w["snow"]), ("Snow", w["snow"]),
                 ("Thunderstorm", w["storm"])]
        return ["-".join(label for label, flags in parts if flags[i]) for i in range(len(w["mean"]))]

    def sales_effect(self, name):
        """Bad weather keeps some shoppers home."""
        w = self.rows[name]
        return -0.03 * w["rain"] - 0.05 * w["snow"] - 0.04 * w["storm"] - 0.003 * np.abs(w["mean"] - 15)


def generate(output, stores=REAL_STORE_COUNT, seed=42):
    """Writes the seven files into ``output``; returns {file name: data rows written}."""
    rng = np.random.default_rng(seed)
    os.makedirs(output, exist_ok=True)
    all_days = day_range(TRAIN_DAYS[0], TEST_DAYS[1])
    store = Stores(rng, stores)
    calendar = Calendar(all_days, STORE_STATES)
    weather = Weather(rng, all_days)
    state_name = {code: name for name, code in STATE_NAMES}
    season = seasonal_effect(all_days)
    weekday = np.array([d.weekday() for d in all_days])
    # Promotions run Monday to Friday every other week, in every store at once.
    iso_week = np.array([d.isocalendar()[1] for d in all_days])
    promo = ((iso_week % 2 == 0) & (weekday < 5)).astype(np.int8)
    promo2_month = np.array([MONTH_NAMES[d.month - 1] for d in all_days])
    opened = store.competition_opened(stores)

    n_days = len(all_days)
    sales = np.zeros((stores, n_days), dtype=np.int64)
    customers = np.zeros((stores, n_days), dtype=np.int64)
    open_ = np.zeros((stores, n_days), dtype=np.int8)
    for s in range(stores):
        state = store.state[s]
        holiday = calendar.holiday[state]
        is_open = (holiday == "0") & ((weekday != 6) | store.sunday_open[s]) & (rng.random(n_days) > 0.004)
        log_sales = store.level[s] + WEEKDAY_EFFECT[weekday] + season + calendar.around[state]
        log_sales += store.promo_lift[s] * promo + store.saturday[s] * (weekday == 5)
        log_sales += 0.04 * calendar.school[state] + weather.sales_effect(state_name[state])
        if opened[s] is not None:
            since = np.array([(d - opened[s]).days for d in all_days])
            log_sales -= 0.12 * np.clip(since / 180, 0, 1)
        if store.promo2[s]:
            running = np.array([d.year > store.promo2_year[s] or (d.year == store.promo2_year[s] and
                                                                  d.isocalendar()[1] >= store.promo2_week[s])
                                for d in all_days])
            log_sales += 0.05 * running * np.isin(promo2_month, store.promo_interval[s].split(","))
        log_sales += rng.normal(0, NOISE_SIGMA, n_days)
        sales[s] = np.where(is_open, np.round(np.exp(log_sales)), 0)
        customers[s] = np.where(is_open, np.round(sales[s] / (store.basket[s] * np.exp(rng.normal(0, 0.08, n_days)))),
                                0)
        open_[s] = is_open

    first_test = all_days.index(TEST_DAYS[0])
    counts = {}
    counts["train.csv"] = _write_days(output, "train.csv", range(first_test - 1, -1, -1), range(stores), all_days,
                                      store, calendar, promo, open_, sales, customers)
    test_stores = np.sort(rng.choice(stores, size=max(1, round(stores * 856 / 1115)), replace=False))
    counts["test.csv"] = _write_days(output, "test.csv", range(n_days - 1, first_test - 1, -1), test_stores, all_days,
                                     store, calendar, promo, open_, None, None, rng=rng)
    counts["store.csv"] = _write_stores(output, store)
    counts["store_states.csv"] = _write(output, "store_states.csv", ["Store", "State"],
                                        zip(store.ids, store.state))
    counts["state_names.csv"] = _write(output, "state_names.csv", ["StateName", "State"], STATE_NAMES)
    counts["googletrend.csv"] = _write_trends(output, rng, all_days)
    counts["weather.csv"] = _write_weather(output, weather, all_days)
    return counts


def _write(output, name, header, rows):
    with open(os.path.join(output, name), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        count = 0
        for row in rows:
            writer.writerow(row)
            count += 1
    return count


def _write_days(output, name, day_indices, store_indices, days, store, calendar, promo, open_, sales, customers,
                rng=None):
    """train.csv (``sales`` given) or test.csv: the newest day first, stores in order, as Kaggle's."""
    def rows():
        for i in day_indices:
            day = days[i]
            for s in store_indices:
                state = store.state[s]
                opened = str(open_[s, i])
                if rng is not None and rng.random() < 0.0003:
                    opened = ""  # the real test.csv has a few unknown Open values
                common = [day.isoweekday(), day.isoformat()]
                flags = [promo[i], calendar.holiday[state][i], calendar.school[state][i]]
                if sales is not None:
                    yield [store.ids[s], *common, sales[s, i], customers[s, i], opened, *flags]
                else:
                    yield [store.ids[s], *common, opened, *flags]

    if sales is not None:
        header = ["Store", "DayOfWeek", "Date", "Sales", "Customers", "Open", "Promo", "StateHoliday", "SchoolHoliday"]
        return _write(output, name, header, rows())
    header = ["Id", "Store", "DayOfWeek", "Date", "Open", "Promo", "StateHoliday", "SchoolHoliday"]
    return _write(output, name, header, ([n + 1] + row for n, row in enumerate(rows())))


def _write_stores(output, store):
    def blank(value):
        return "" if not value else int(value)

    rows = ([sid, t, a, "" if np.isnan(dist) else int(dist), blank(cm), blank(cy), int(p2), blank(p2w), blank(p2y),
             interval]
            for sid, t, a, dist, cm, cy, p2, p2w, p2y, interval in zip(
                store.ids, store.type, store.assortment, store.distance, store.competition_month,
                store.competition_year, store.promo2, store.promo2_week, store.promo2_year, store.promo_interval))
    header = ["Store", "StoreType", "Assortment", "CompetitionDistance", "CompetitionOpenSinceMonth",
              "CompetitionOpenSinceYear", "Promo2", "Promo2SinceWeek", "Promo2SinceYear", "PromoInterval"]
    return _write(output, "store.csv", header, rows)


def _write_trends(output, rng, days):
    """Weekly Google Trends per state (weeks from Sunday to Saturday), following the season. The
    tutorial joins a day to the week whose Sunday is in the day's ISO week (the Sunday after it),
    so the weeks run to the Sunday after the last day, as in the real file."""
    first = days[0] - datetime.timedelta((days[0].weekday() + 1) % 7)  # the Sunday on or before
    weeks = []
    while first <= days[-1] + datetime.timedelta(6):
        weeks.append(first)
        first += datetime.timedelta(7)
    middle = np.array([(w + datetime.timedelta(3)).timetuple().tm_yday for w in weeks])
    season = np.sin(2 * math.pi * (middle - 80) / 365.25) + 2.5 * (middle > 330)

    def rows():
        for series in ["Rossmann_DE"] + ["Rossmann_DE_" + s for s in TREND_STATES]:
            level = rng.uniform(45, 70)
            values = np.clip(np.round(level + 8 * season + rng.normal(0, 4, len(weeks))), 0, 100)
            for week, value in zip(weeks, values):
                yield [series, "%s - %s" % (week.isoformat(), (week + datetime.timedelta(6)).isoformat()),
                       int(value)]

    return _write(output, "googletrend.csv", ["file", "week", "trend"], rows())


def _write_weather(output, weather, days):
    def rows():
        for name, _ in STATE_NAMES:
            w = weather.rows[name]
            events = weather.events(name)
            for i, day in enumerate(days):
                mean = w["mean"][i]
                high, low = mean + w["spread"][i], mean - w["spread"][i] * 0.9
                dew = mean - (100 - w["humidity"][i]) / 5
                humidity = w["humidity"][i]
                pressure = w["pressure"][i]
                gust = w["gust"][i]
                yield [name, day.isoformat(), round(high), round(mean), round(low), round(dew + 2), round(dew),
                       round(dew - 3), round(min(100, humidity + 10)), round(humidity), round(max(10, humidity - 25)),
                       round(pressure + 4), round(pressure), round(pressure - 4), round(w["visibility"][i] + 8),
                       round(w["visibility"][i]), round(max(0, w["visibility"][i] - 6)),
                       round(w["wind"][i] * 1.6), round(w["wind"][i]), "" if np.isnan(gust) else round(gust),
                       "%.2f" % w["precipitation"][i], "" if w["cloud_missing"][i] else int(w["cloud"][i]),
                       events[i], w["direction"][i]]

    return _write(output, "weather.csv", WEATHER_COLUMNS, rows())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--output", required=True, help="directory to write the CSV files into")
    parser.add_argument("--stores", type=int, default=REAL_STORE_COUNT,
                        help="number of stores (the real data has 1115: about 1M training rows); "
                             "training rows are about 942 per store")
    parser.add_argument("--seed", type=int, default=42, help="random seed: the same seed writes the same files")
    args = parser.parse_args()
    if args.stores < 1:
        parser.error("--stores must be at least 1")
    for name, count in generate(args.output, args.stores, args.seed).items():
        print("%s: %d rows" % (os.path.join(args.output, name), count))


if __name__ == "__main__":
    main()

"""English normalization: numbers, ordinals, money, percentages, dates, times, phone numbers,
units, common abbreviations, URLs and e-mail addresses to the words an American reader says.

Numbers are spelled by num2words; the written forms around them are recognised here by one
regular expression whose alternatives are tried in order at each position, so "5/6/2024" is a
date before it can be a fraction and "(555) 123-4567" a phone number before it can be three
numbers. Words come out without hyphens or commas inside a number ("twenty four", not
"twenty-four,"): G2P front ends read a hyphen or comma as a pause.
"""
from __future__ import annotations

import re
from functools import lru_cache

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.textnorm import Normalized, rewrite

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
_MONTH_NUMBER = {m.lower(): i for i, m in enumerate(MONTHS, 1)} | {
    m.lower()[:3]: i for i, m in enumerate(MONTHS, 1)} | {"sept": 9}
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# money: symbol -> (one, many, cent one, cents many)
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "sen", "sen"),
             "₹": ("rupee", "rupees", "paisa", "paise")}
_SCALE = {"k": "thousand", "m": "million", "mn": "million", "b": "billion", "bn": "billion",
          "thousand": "thousand", "million": "million", "billion": "billion", "trillion": "trillion"}

# unit symbol -> (singular, plural); matched case-sensitively after a number
_UNITS = {
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "yd": ("yard", "yards"), "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"), "l": ("liter", "liters"), "L": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"), "gal": ("gallon", "gallons"),
    "mph": ("mile per hour", "miles per hour"), "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"), "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"), "min": ("minute", "minutes"), "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"), "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"), "GHz": ("gigahertz", "gigahertz"), "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"), "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"), "V": ("volt", "volts"), "mAh": ("milliamp hour", "milliamp hours"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"), "°C": ("degree Celsius", "degrees Celsius"),
    "°": ("degree", "degrees"), "sq ft": ("square foot", "square feet"),
}

# abbreviation (with its full stop) -> words; titles only before a capitalised name
_TITLES = {"Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Dr.": "Doctor", "Prof.": "Professor",
           "St.": "Saint", "Mt.": "Mount", "Capt.": "Captain", "Gen.": "General", "Lt.": "Lieutenant",
           "Sgt.": "Sergeant", "Rev.": "Reverend", "Gov.": "Governor", "Sen.": "Senator", "Rep.": "Representative"}
# after a word (not before a name), the same letters mean something else
_TITLE_AFTER = {"Dr.": "Drive", "St.": "Street"}
_ABBREVIATIONS = {"Jr.": "Junior", "Sr.": "Senior", "vs.": "versus", "vs": "versus", "etc.": "et cetera",
                  "e.g.": "for example", "i.e.": "that is", "approx.": "approximately", "Ave.": "Avenue",
                  "Blvd.": "Boulevard", "Rd.": "Road", "Inc.": "Incorporated", "Ltd.": "Limited",
                  "Co.": "Company", "Corp.": "Corporation", "Dept.": "Department", "est.": "established",
                  "min.": "minimum", "max.": "maximum", "no.": "number", "No.": "number"}
# abbreviations that may end a sentence: their full stop stays when a new sentence follows
_MAY_END = {"Jr.", "Sr.", "etc.", "Ave.", "Blvd.", "Rd.", "Inc.", "Ltd.", "Co.", "Corp.", "Dept.", "Dr.", "St."}

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_MONTH_RE = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
             r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_TLD = r"(?:com|org|net|edu|gov|io|dev|ai|app|co|uk|us|info|biz|me|tv)"
_END_OK = r"(?![\w@])"          # a match must not stop inside a word


def _units_re() -> str:
    names = sorted(_UNITS, key=len, reverse=True)
    return "|".join(re.escape(u) for u in names)


_PATTERN = re.compile("|".join(f"(?P<{name}>{body})" for name, body in [
    ("email", r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+"),
    ("url", r"(?:https?://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)]"
            rf"|\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.{_TLD}\b(?:/[^\s<>\"']*[^\s<>\"'.,;:!?)])?"),
    ("phone", r"(?<![\w-])(?:\+?1[-.\s])?(?:\(\d{3}\)\s?|\d{3}[-.])\d{3}[-.]\d{4}(?![\w-])"
              r"|(?<![\w-])\d{3}-\d{4}(?![\w-])"),
    ("iso_date", r"\b\d{4}-\d{2}-\d{2}\b"),
    ("slash_date", r"\b\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})\b"),
    ("month_date", rf"\b{_MONTH_RE}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?"),
    ("day_month", rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH_RE}\b\.?(?:,?\s+\d{{4}}\b)?"),
    ("month_year", rf"\b{_MONTH_RE}\.?\s+\d{{4}}\b"),
    ("clock", r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\b\.?)?"),
    ("hour_ampm", r"\b\d{1,2}\s?[AaPp]\.?[Mm]\b\.?"),
    ("money", rf"[$€£¥₹]\s?(?:{_NUM})(?:\s?(?:thousand|million|billion|trillion|[kKmMbB]n?)\b)?"),
    ("cents", r"\b\d+\s?¢"),
    ("percent", rf"(?<![\w.])-?(?:{_NUM})\s?%"),
    ("measure", rf"(?<![\w.])-?(?:{_NUM})\s?(?:{_units_re()})(?![\w/])"),
    ("ordinal", r"\b\d+(?:st|nd|rd|th)\b"),
    ("decade", r"\b(?:1[0-9]|20)\d0s\b|'\d0s\b"),
    ("mixed_fraction", r"\b\d+\s\d+/\d+\b"),
    ("fraction", r"\b\d+/\d+\b"),
    ("range", rf"(?<![\w.])(?:{_NUM})\s?[-–]\s?(?:{_NUM})(?![\w.])"),
    ("number_sign", r"#\s?\d+\b"),
    ("year", r"(?<![\w.,$])(?:1[1-9]\d\d|20\d\d)(?![\w.,]\d|\w)"),
    ("number", rf"(?<![\w.])-?(?:{_NUM}){_END_OK}"),
    ("title", r"\b(?:" + "|".join(re.escape(t[:-1]) for t in _TITLES) + r")\.(?=\s)"),
    ("abbreviation", r"(?<![\w.])(?:" + "|".join(re.escape(a) for a in sorted(_ABBREVIATIONS, key=len, reverse=True))
                     + r")(?=\s|$|[,;:!?)])"),
    ("ampersand", r"(?<=\s)&(?=\s)"),
]))


@lru_cache(maxsize=1)
def _num2words():
    try:
        from num2words import num2words
    except ImportError as err:
        raise BackendUnavailableError("English text normalization needs num2words: pip install num2words "
                                      "(or turn it off with --no-normalize)") from err
    return num2words


def _words(text: str) -> str:
    """num2words output in the form G2P reads without pauses: no hyphens, commas or British "and"."""
    text = text.replace("-", " ").replace(",", "")
    return " ".join(w for w in text.split() if w != "and")


def cardinal(digits: str) -> str:
    """ "1,234" -> "one thousand two hundred thirty four"; "3.14" -> "three point one four";
    a leading minus -> "minus"; over fifteen digits, or a leading zero, digit by digit."""
    s = digits.replace(",", "")
    sign = ""
    if s.startswith("-"):
        sign, s = "minus ", s[1:]
    whole, _, frac = s.partition(".")
    if len(whole) > 15 or (len(whole) > 1 and whole.startswith("0")):
        spoken = spell_digits(whole)
    else:
        spoken = _words(_num2words()(int(whole)))
    if frac:
        spoken += " point " + spell_digits(frac)
    return sign + spoken


def spell_digits(digits: str) -> str:
    return " ".join(_DIGITS[int(d)] for d in digits if d.isdigit())


def ordinal(n: int) -> str:
    return _words(_num2words()(n, to="ordinal"))


def year(n: int) -> str:
    """1984 -> "nineteen eighty four", 2005 -> "two thousand five", 1900 -> "nineteen hundred"."""
    if 2000 <= n <= 2009 or not 1000 <= n <= 2099:
        return cardinal(str(n))
    return _words(_num2words()(n, to="year"))


def _plural(words: str) -> str:
    """ "nineteen ninety" -> "nineteen nineties"."""
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return f"{head} {last}".strip()


def date(month: int, day: int | None, yr: int | None) -> str:
    if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
        raise ValueError("not a date")
    out = MONTHS[month - 1]
    if day is not None:
        out += " " + ordinal(day)
    if yr is not None:
        out += (", " if day is not None else " ") + year(yr)
    return out


def _full_year(text: str) -> int:
    n = int(text)
    if len(text) == 2:
        n += 2000 if n < 50 else 1900
    return n


def _keep_stop(m: re.Match[str], spoken: str) -> str:
    """Keep a match's final full stop when it ends a sentence (end of text, a line end, or a
    capitalised word next), so that dropping the abbreviation's dot does not merge sentences."""
    if not m.group(0).endswith("."):
        return spoken
    rest = m.string[m.end():]
    after = rest.lstrip(" \t")
    if not after or rest[:1] == "\n" or (after[0].isupper() and rest[:1].isspace()):
        return spoken + "."
    return spoken


def _email(m: re.Match[str]) -> str:
    local, _, domain = m.group(0).partition("@")
    return f"{_spell_address(local)} at {_spell_address(domain)}"


_SYMBOLS = {".": "dot", "/": "slash", "-": "dash", "_": "underscore", ":": "colon", "?": "question mark",
            "=": "equals", "&": "and", "+": "plus", "%": "percent", "#": "hash", "~": "tilde", "@": "at"}


def _spell_address(text: str) -> str:
    out = []
    for part in re.findall(r"[A-Za-z]+|\d+|.", text):
        if part.isdigit():
            out.append(spell_digits(part) if len(part) > 3 else cardinal(part))
        elif part.isalpha():
            out.append(" ".join(part.upper()) if part.lower() == "www" else part)
        elif part in _SYMBOLS:
            out.append(_SYMBOLS[part])
    return " ".join(out)


def _url(m: re.Match[str]) -> str:
    return _spell_address(re.sub(r"^https?://", "", m.group(0)))


def _phone(m: re.Match[str]) -> str:
    groups = re.findall(r"\d+", m.group(0))
    return ", ".join(spell_digits(g) for g in groups)


def _iso_date(m: re.Match[str]) -> str:
    y, mo, d = m.group(0).split("-")
    try:
        return date(int(mo), int(d), int(y))
    except ValueError:
        return m.group(0)


def _slash_date(m: re.Match[str]) -> str:
    a, b, y = m.group(0).split("/")
    month, day = (int(a), int(b)) if int(a) <= 12 else (int(b), int(a))   # US order unless the first is a day
    try:
        return date(month, day, _full_year(y))
    except ValueError:
        return m.group(0)


def _month(name: str) -> int:
    return _MONTH_NUMBER[name.rstrip(".").lower()]


def _month_date(m: re.Match[str]) -> str:
    name, day, yr = re.match(r"(\w+)\.?\s+(\d+)(?:st|nd|rd|th)?(?:,?\s+(\d{4}))?", m.group(0)).groups()
    try:
        return date(_month(name), int(day), int(yr) if yr else None)
    except ValueError:
        return m.group(0)


def _day_month(m: re.Match[str]) -> str:
    day, name, yr = re.match(r"(\d+)(?:st|nd|rd|th)?\s+(?:of\s+)?(\w+)\.?(?:,?\s+(\d{4}))?", m.group(0)).groups()
    if not 1 <= int(day) <= 31:
        return m.group(0)
    out = f"the {ordinal(int(day))} of {MONTHS[_month(name) - 1]}"
    return out + (f", {year(int(yr))}" if yr else "")


def _month_year(m: re.Match[str]) -> str:
    name, yr = re.match(r"(\w+)\.?\s+(\d{4})", m.group(0)).groups()
    return f"{MONTHS[_month(name) - 1]} {year(int(yr))}"


def _meridiem(text: str) -> str:
    letter = re.search(r"[AaPp]\.?[Mm]", text)
    return "" if letter is None else (" A M" if letter.group(0)[0] in "Aa" else " P M")


def _clock(m: re.Match[str]) -> str:
    h, mi, *sec = re.findall(r"\d+", m.group(0))
    hour, minute = int(h), int(mi)
    if hour > 24 or minute > 59:
        return m.group(0)
    ampm = _meridiem(m.group(0))
    if minute == 0:
        spoken = cardinal(h) + ("" if ampm else " o'clock") if hour else "zero hundred"
    elif minute < 10:
        spoken = f"{cardinal(h)} oh {_DIGITS[minute]}"
    else:
        spoken = f"{cardinal(h)} {cardinal(mi)}"
    if sec and int(sec[0]):
        spoken += f" and {cardinal(sec[0])} seconds"
    return _keep_stop(m, spoken + ampm)


def _hour_ampm(m: re.Match[str]) -> str:
    h = re.match(r"\d+", m.group(0)).group(0)
    if not 1 <= int(h) <= 12:
        return m.group(0)
    return _keep_stop(m, cardinal(h) + _meridiem(m.group(0)[len(h):]))


def _money(m: re.Match[str]) -> str:
    text = m.group(0)
    one, many, cent, cents = _CURRENCY[text[0]]
    amount, scale = re.match(rf"[^\d]*({_NUM})\s?([A-Za-z]*)", text).groups()
    if scale:
        return f"{cardinal(amount)} {_SCALE[scale.lower()]} {many}"
    whole, _, frac = amount.replace(",", "").partition(".")
    n_whole = int(whole)
    if len(frac) != 2:             # $1.5 or $3.125: a number of dollars, not dollars and cents
        return f"{cardinal(amount)} {one if amount == '1' else many}"
    n_cents = int(frac)
    dollars = f"{cardinal(whole)} {one if n_whole == 1 else many}"
    if n_cents == 0:
        return dollars
    small = f"{cardinal(frac)} {cent if n_cents == 1 else cents}"
    return small if n_whole == 0 else f"{dollars} and {small}"


def _cents(m: re.Match[str]) -> str:
    n = re.match(r"\d+", m.group(0)).group(0)
    return f"{cardinal(n)} {'cent' if n == '1' else 'cents'}"


def _percent(m: re.Match[str]) -> str:
    return cardinal(m.group(0).rstrip("%").strip()) + " percent"


def _measure(m: re.Match[str]) -> str:
    amount, unit = re.match(rf"(-?(?:{_NUM}))\s?(.+)", m.group(0)).groups()
    singular, plural = _UNITS[unit]
    return f"{cardinal(amount)} {singular if amount == '1' else plural}"


def _ordinal(m: re.Match[str]) -> str:
    return ordinal(int(m.group(0)[:-2]))


def _decade(m: re.Match[str]) -> str:
    text = m.group(0)
    if text.startswith("'"):
        return _plural(cardinal(text[1:3]))
    return _plural(year(int(text[:4])))


_FRACTION_NAMES = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def fraction(num: int, den: int) -> str:
    if den in _FRACTION_NAMES:
        name = _FRACTION_NAMES[den][num != 1]
    else:
        name = ordinal(den) + ("s" if num != 1 else "")
    return f"{cardinal(str(num))} {name}"


def _fraction(m: re.Match[str]) -> str:
    num, den = (int(x) for x in m.group(0).split("/"))
    return m.group(0) if den == 0 else fraction(num, den)


def _mixed_fraction(m: re.Match[str]) -> str:
    whole, rest = m.group(0).split()
    num, den = (int(x) for x in rest.split("/"))
    if den == 0 or num >= den:
        return f"{cardinal(whole)} {_fraction(re.match(r'.*', rest))}"
    return f"{cardinal(whole)} and {fraction(num, den)}"


def _range(m: re.Match[str]) -> str:
    a, b = re.split(r"\s?[-–]\s?", m.group(0), maxsplit=1)
    return f"{cardinal(a)} to {cardinal(b)}"


def _number_sign(m: re.Match[str]) -> str:
    return "number " + cardinal(m.group(0).lstrip("#").strip())


def _year(m: re.Match[str]) -> str:
    return year(int(m.group(0)))


def _number(m: re.Match[str]) -> str:
    return cardinal(m.group(0))


def _title(m: re.Match[str]) -> str:
    abbr = m.group(0)
    rest = m.string[m.end():].lstrip()
    before = m.string[:m.start()].rstrip()
    if abbr in _TITLE_AFTER and before and before[-1].isalnum() and before.split()[-1][:1].isupper():
        return _keep_stop(m, _TITLE_AFTER[abbr])       # "Main St." -> Street, "Mulholland Dr." -> Drive
    if rest[:1].isupper():
        return _TITLES[abbr]
    return _keep_stop(m, _TITLE_AFTER.get(abbr, _TITLES[abbr]))


def _abbreviation(m: re.Match[str]) -> str:
    abbr = m.group(0)
    spoken = _ABBREVIATIONS[abbr]
    if abbr in ("no.", "No.") and not re.match(r"\s*\d", m.string[m.end():]):
        return abbr                     # "No." before anything but a number is the word "no"
    return _keep_stop(m, spoken) if abbr in _MAY_END else spoken


_RULES = {"email": _email, "url": _url, "phone": _phone, "iso_date": _iso_date, "slash_date": _slash_date,
          "month_date": _month_date, "day_month": _day_month, "month_year": _month_year, "clock": _clock,
          "hour_ampm": _hour_ampm, "money": _money, "cents": _cents, "percent": _percent, "measure": _measure,
          "ordinal": _ordinal, "decade": _decade, "mixed_fraction": _mixed_fraction, "fraction": _fraction,
          "range": _range, "number_sign": _number_sign, "year": _year, "number": _number, "title": _title,
          "abbreviation": _abbreviation, "ampersand": lambda m: "and"}


def normalize(text: str) -> Normalized:
    """English ``text`` with its written forms read out (see the module docstring)."""
    return rewrite(text, _PATTERN, _RULES)


SAY_AS_KINDS = ("characters", "spell-out", "cardinal", "number", "ordinal", "digits", "date", "telephone")


def say_as(kind: str, text: str, detail: str | None = None) -> str:
    """SSML ``<say-as>``: ``kind`` is interpret-as, ``detail`` its format (dates: mdy, dmy, ymd, ...)."""
    text = text.strip()
    try:
        if kind in ("characters", "spell-out"):
            return " ".join(_DIGITS[int(c)] if c.isdigit() else c.upper() for c in text if not c.isspace())
        if kind == "digits":
            return spell_digits(text)
        if kind in ("cardinal", "number"):
            return cardinal(_only(text, rf"-?(?:{_NUM})"))
        if kind == "ordinal":
            return ordinal(int(_only(text, r"\d+(?:st|nd|rd|th)?").rstrip("stndrh")))
        if kind == "telephone":
            groups = re.findall(r"\d+", text)
            if not groups:
                raise ValueError
            return ", ".join(spell_digits(g) for g in groups)
        if kind == "date":
            return _say_date(text, (detail or "mdy").lower())
    except ValueError:
        raise UsageError(f"SSML <say-as interpret-as=\"{kind}\">: cannot read {text!r} as {kind}") from None
    raise UsageError(f"SSML <say-as interpret-as=\"{kind}\"> is not supported; it takes {', '.join(SAY_AS_KINDS)}")


def _only(text: str, pattern: str) -> str:
    if not re.fullmatch(pattern, text):
        raise ValueError(text)
    return text


def _say_date(text: str, fmt: str) -> str:
    parts = [int(p) for p in re.findall(r"\d+", text)]
    if len(parts) != len(fmt) or not set(fmt) <= set("ymd"):
        raise ValueError(text)
    got = dict(zip(fmt, parts))
    if "m" not in got:
        raise ValueError(text)
    yr = got.get("y")
    return date(got["m"], got.get("d"), _full_year(str(yr)) if yr is not None and yr < 100 else yr)

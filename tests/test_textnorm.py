"""The text normalizer (ttscli.textnorm): English written forms read out, the map back to the
input, and the language registry."""
from __future__ import annotations

import re

import pytest

from ttscli.errors import UsageError
from ttscli.textnorm import base_language, normalize, say_as, text_language


@pytest.mark.parametrize("written, spoken", [
    # numbers, ordinals, fractions, ranges, percentages
    ("There are 1,234 books.", "There are one thousand two hundred thirty four books."),
    ("Pi is 3.14 here.", "Pi is three point one four here."),
    ("It fell to -5 overnight.", "It fell to minus five overnight."),
    ("She came 1st, he came 23rd.", "She came first, he came twenty third."),
    ("Read pages 10-20 now.", "Read pages ten to twenty now."),
    ("Add 1/2 cup and 3/4 spoon.", "Add one half cup and three quarters spoon."),
    ("Use 2 1/2 cups.", "Use two and one half cups."),
    ("About 75% voted.", "About seventy five percent voted."),
    ("Room #12 is left.", "Room number twelve is left."),
    ("Agent 007 called.", "Agent zero zero seven called."),
    ("He was born in the 1980s.", "He was born in the nineteen eighties."),
    # money
    ("It costs $12.50 today.", "It costs twelve dollars and fifty cents today."),
    ("A coffee is $3.", "A coffee is three dollars."),
    ("I owe you $1.", "I owe you one dollar."),
    ("He found $0.75 there.", "He found seventy five cents there."),
    ("They raised $1.5 million.", "They raised one point five million dollars."),
    ("The budget is $2 billion.", "The budget is two billion dollars."),
    ("She paid €20 and £7.50.", "She paid twenty euros and seven pounds and fifty pence."),
    ("Gum was 50¢ then.", "Gum was fifty cents then."),
    # dates and years
    ("We met on 5/6/2024 at noon.", "We met on May sixth, twenty twenty four at noon."),
    ("Born 25/12/1990.", "Born December twenty fifth, nineteen ninety."),
    ("Signed on 2023-07-04.", "Signed on July fourth, twenty twenty three."),
    ("On January 15, 2019 we moved.", "On January fifteenth, twenty nineteen we moved."),
    ("It opens March 3rd.", "It opens March third."),
    ("Signed on 6 June 1944.", "Signed on the sixth of June, nineteen forty four."),
    ("They married in 2008.", "They married in two thousand eight."),
    ("It started in September 2021.", "It started in September twenty twenty one."),
    ("Opened on Aug. 9, 1999.", "Opened on August ninth, nineteen ninety nine."),
    ("You may go.", "You may go."),
    # times
    ("It leaves at 3:30 pm.", "It leaves at three thirty P M."),
    ("Lands at 11:05 tonight.", "Lands at eleven oh five tonight."),
    ("Lights out at 10:00 sharp.", "Lights out at ten o'clock sharp."),
    ("Dinner at 7 p.m. on Sunday.", "Dinner at seven P M on Sunday."),
    ("We left at 7 a.m. Then it rained.", "We left at seven A M. Then it rained."),
    # phone numbers
    ("Call 555-1234 now.", "Call five five five, one two three four now."),
    ("Call (212) 555-0187.", "Call two one two, five five five, zero one eight seven."),
    ("Dial 1-800-555-0199.", "Dial one, eight zero zero, five five five, zero one nine nine."),
    ("Text 617.555.0142 today.", "Text six one seven, five five five, zero one four two today."),
    # units
    ("I ran 5 km today.", "I ran five kilometers today."),
    ("It weighs 1 kg.", "It weighs one kilogram."),
    ("The limit is 65 mph.", "The limit is sixty five miles per hour."),
    ("It was 72°F out.", "It was seventy two degrees Fahrenheit out."),
    ("The chip runs at 3.2 GHz.", "The chip runs at three point two gigahertz."),
    ("The flat is 900 sq ft.", "The flat is nine hundred square feet."),
    # abbreviations
    ("Dr. Smith will see you.", "Doctor Smith will see you."),
    ("We live on Main St. near the park.", "We live on Main Street near the park."),
    ("They visited St. Louis.", "They visited Saint Louis."),
    ("Mr. and Mrs. Brown came.", "Mister and Missus Brown came."),
    ("Bring fruit, e.g. apples, pears, etc. and bread.",
     "Bring fruit, for example apples, pears, et cetera and bread."),
    ("It was Lions vs. Bears.", "It was Lions versus Bears."),
    ("She works at Acme Inc. Her boss is nice.", "She works at Acme Incorporated. Her boss is nice."),
    ("No. 7 won.", "number seven won."),
    ("No way.", "No way."),
    ("Salt & pepper.", "Salt and pepper."),
    # addresses
    ("Mail jane.doe@example.com today.", "Mail jane dot doe at example dot com today."),
    ("See https://example.org/docs, then rest.", "See example dot org slash docs, then rest."),
    ("Visit www.example.org now.", "Visit W W W dot example dot org now."),
    # text without written forms is left alone
    ("They live here.", "They live here."),
])
def test_english_reads_written_forms_out(written, spoken):
    assert normalize(written, "en").text == spoken


def test_no_digits_survive_the_fixture_sentences():
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "textnorm" / "sentences.tsv"
    lines = [ln.split("\t")[1] for ln in fixture.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    assert len(lines) >= 100
    left = [(t, normalize(t, "en").text) for t in lines if re.search(r"[\d$€£¥¢%@#&°]", normalize(t, "en").text)]
    assert not left


def test_output_spans_map_back_to_the_input_words():
    text = "Pay $12.50 on 5/6/2024, Dr. Smith."
    n = normalize(text, "en")
    assert n.text == "Pay twelve dollars and fifty cents on May sixth, twenty twenty four, Doctor Smith."

    def source_of(word: str) -> str:
        start = n.text.index(word)
        s, e = n.to_source(start, start + len(word))
        return text[s:e]

    assert source_of("Pay") == "Pay"
    assert source_of("fifty cents") == "$12.50"
    assert source_of("on") == "on"
    assert source_of("sixth") == "5/6/2024"
    assert source_of("Doctor") == "Dr."
    assert source_of("Smith.") == "Smith."
    # every output word maps inside the input, in order
    spans = [n.to_source(m.start(), m.end()) for m in re.finditer(r"\S+", n.text)]
    assert all(0 <= s < e <= len(text) for s, e in spans)
    assert [s for s, _ in spans] == sorted(s for s, _ in spans)


@pytest.mark.parametrize("name, base", [("en-us", "en"), ("EN_GB", "en"), ("English", "en"), ("ja", "ja"),
                                        ("japanese", "ja"), ("auto", None), (None, None)])
def test_base_language(name, base):
    assert base_language(name) == base


def test_other_languages_pass_through_and_auto_picks_english_for_ascii():
    assert normalize("It costs $5.", "ja").text == "It costs $5."
    assert normalize("Es kostet 5 €.", "de").text == "Es kostet 5 €."
    assert text_language(None, ["en-us"], "x") == "en"
    assert text_language(None, ["auto", "en", "ja"], "Pay $5.") == "en"
    assert text_language(None, ["auto", "en", "ja"], "5時に会いましょう") is None
    assert text_language("japanese", ["auto", "en", "ja"], "Pay $5.") == "ja"


@pytest.mark.parametrize("kind, text, fmt, spoken", [
    ("characters", "AB1", None, "A B one"),
    ("cardinal", "1,204", None, "one thousand two hundred four"),
    ("ordinal", "3", None, "third"),
    ("date", "12/25/1990", "mdy", "December twenty fifth, nineteen ninety"),
    ("date", "25.12.1990", "dmy", "December twenty fifth, nineteen ninety"),
    ("telephone", "555-1234", None, "five five five, one two three four"),
])
def test_say_as(kind, text, fmt, spoken):
    assert say_as(kind, text, fmt, "en") == spoken


@pytest.mark.parametrize("kind, text, lang, needle", [
    ("cardinal", "abc", "en", "cannot read 'abc' as cardinal"),
    ("currency", "5", "en", "not supported"),
    ("cardinal", "5", "ja", "English only"),
])
def test_say_as_refuses_what_it_cannot_read(kind, text, lang, needle):
    with pytest.raises(UsageError, match=needle):
        say_as(kind, text, None, lang)

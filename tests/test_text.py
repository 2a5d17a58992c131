import pytest

from ttscli.errors import InputTooLongError, UsageError
from ttscli.text import MAX_TEXT_BYTES, check_text, chunk_text, decode_text, split_sentences


@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith paid $3.50 for it. Then he left!", ["Dr. Smith paid $3.50 for it.", "Then he left!"]),
    ('"Really?" she asked. Yes.', ['"Really?" she asked.', "Yes."]),
    ('He said "Stop." Then silence.', ['He said "Stop."', "Then silence."]),
    ("J. R. R. Tolkien wrote it, e.g. The Hobbit... It sold well.",
     ["J. R. R. Tolkien wrote it, e.g. The Hobbit...", "It sold well."]),
    ("Pi is 3.14159 roughly. Visit example.com now.", ["Pi is 3.14159 roughly.", "Visit example.com now."]),
    ("Meet at 5 p.m. tomorrow. Bring Mrs. Jones.", ["Meet at 5 p.m. tomorrow.", "Bring Mrs. Jones."]),
    ("今天天气很好。我们去公园吧！好的", ["今天天气很好。", "我们去公园吧！", "好的"]),
    ("「你好。」他说。", ["「你好。」", "他说。"]),
    ("What?! No way… Really.", ["What?!", "No way…", "Really."]),
    ("First paragraph without stop\n\nSecond one.", ["First paragraph without stop", "Second one."]),
    ("no punctuation at all", ["no punctuation at all"]),
])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_chunks_respect_budget_and_keep_every_word():
    text = " ".join(f"Sentence number {i} is here, with a clause." for i in range(40))
    chunks = chunk_text(text, 120)
    assert all(len(c) <= 120 for c in chunks)
    assert " ".join(chunks).split() == text.split()


def test_overlong_sentence_is_split_at_clauses_then_spaces():
    text = "word " * 100 + "end, and more words here."
    chunks = chunk_text(text, 50)
    assert all(len(c) <= 50 for c in chunks)
    assert " ".join(chunks).split() == text.split()


def test_limits():
    assert check_text("a" * MAX_TEXT_BYTES) == "a" * MAX_TEXT_BYTES
    with pytest.raises(InputTooLongError, match="32,768"):
        check_text("a" * (MAX_TEXT_BYTES + 1))
    with pytest.raises(UsageError, match="empty"):
        check_text(" \n ")
    with pytest.raises(UsageError, match="UTF-8"):
        decode_text(b"\xc3\x28")
    with pytest.raises(UsageError, match="UTF-8"):
        check_text("bad \udce9 surrogate")


def test_read_bounded_stops_one_byte_past_the_limit():
    import io

    from ttscli.text import read_bounded

    class Endless(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            b[:] = b"y" * len(b)
            self.read_so_far = getattr(self, "read_so_far", 0) + len(b)
            return len(b)

    src = io.BufferedReader(Endless())
    with pytest.raises(InputTooLongError, match="at least 32,769 UTF-8 bytes; the limit is 32,768"):
        read_bounded(src)
    assert src.raw.read_so_far < 2 * MAX_TEXT_BYTES  # a buffer's worth past the limit, not all of it
    assert read_bounded(io.BytesIO(b"a" * MAX_TEXT_BYTES)) == b"a" * MAX_TEXT_BYTES
    with pytest.raises(InputTooLongError, match="is 40,000 UTF-8 bytes"):
        read_bounded(io.BytesIO(b"a" * 40_000), size=40_000)


@pytest.mark.parametrize("ch", ["\x00", "\x07", "\x1b", "\x7f", "\x9b"])
def test_control_characters_are_refused_with_their_position(ch):
    with pytest.raises(UsageError, match=f"U\\+{ord(ch):04X} at character 4"):
        check_text("abc" + ch + "def")


def test_whitespace_controls_are_kept():
    assert check_text("a\tb\fc\vd\x85e\r\nf") == "a\tb\fc\vd\x85e\nf"


def test_byte_tokenizer_keeps_specials_whole_and_spells_the_rest_in_bytes():
    from ttscli.text import ByteTokenizer

    # the Qwen3 prompt: <|im_start|>, the role, "\n" are the first three ids, as upstream cuts them
    qwen = ByteTokenizer({"<|im_start|>": 1, "<|im_end|>": 2, "assistant": 77091})
    assert qwen.encode("<|im_start|>assistant\nHé<|im_end|>\n") == [1, 77091, 10, 72, 0xC3, 0xA9, 2, 10]
    # Breeze's: a <bos> first, byte ids after the special tokens' range; the longer name wins
    breeze = ByteTokenizer({"[S1]": 50, "[S10]": 51}, bos=(2,), byte_offset=1000)
    assert breeze.encode("[S10]a[S1]") == [2, 51, 1000 + ord("a"), 50]
    assert ByteTokenizer({}).encode("ab") == [97, 98]

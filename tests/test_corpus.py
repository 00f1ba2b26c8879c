"""Corpus reading: formats, documents, English and Chinese sentence splitting, bad input, streaming."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bertkit.corpus import (
    detect_format,
    is_heading,
    iter_documents,
    read_documents,
    sniff,
    split_sentences,
)
from bertkit.errors import BertkitError
from bertkit.fileio import ReadReport, list_files

# ---- sentence splitting ---------------------------------------------------------------------------------

ENGLISH = [
    ("Mr. Smith went to Washington. He arrived on Jan. 5.", ["Mr. Smith went to Washington.", "He arrived on Jan. 5."]),
    ("Dr. J. R. R. Tolkien lived at St. Giles. It rained.", ["Dr. J. R. R. Tolkien lived at St. Giles.", "It rained."]),
    ("It cost $3.50 in 1998. Pi is 3.14159. Done.", ["It cost $3.50 in 1998.", "Pi is 3.14159.", "Done."]),
    ('"Stop!" he said. "Who?" asked she. Then "Go." She went.',
     ['"Stop!" he said.', '"Who?" asked she.', 'Then "Go."', "She went."]),
    ("The U.S. Army, e.g. the 5th, is No. 1 here. (It won.) Next.",
     ["The U.S. Army, e.g. the 5th, is No. 1 here.", "(It won.)", "Next."]),
    ("I said no. Then I left... Really? Yes! J. M. Barrie agreed. So did I. Fine.",
     ["I said no.", "Then I left...", "Really?", "Yes!", "J. M. Barrie agreed.", "So did I.", "Fine."]),
    ("“Is it so?” said Mrs. Weston. ‘Quite.’ And so.", ["“Is it so?” said Mrs. Weston.", "‘Quite.’", "And so."]),
    ("no capital after. the stop stays", ["no capital after. the stop stays"]),
]  # fmt: skip

CHINESE = [
    ("他说：“你好。”然后走了。", ["他说：“你好。”", "然后走了。"]),
    ("这是１．５米！真的吗？是的；好……我们走吧", ["这是１．５米！", "真的吗？", "是的；", "好……", "我们走吧"]),
    ("此开卷第一回也．作者自云：梦幻之后．", ["此开卷第一回也．", "作者自云：梦幻之后．"]),  # ． as a full stop
    ("「走吧。」『好！』", ["「走吧。」", "『好！』"]),
    ("Hello!我们走? Yes. 好。", ["Hello!", "我们走?", "Yes.", "好。"]),
]


@pytest.mark.parametrize("text, sentences", ENGLISH + CHINESE)
def test_split_sentences(text, sentences):
    assert split_sentences(text) == sentences


def test_split_sentences_empty_and_plain():
    assert split_sentences("   ") == []
    assert split_sentences("no stop at all") == ["no stop at all"]


def test_headings():
    for heading in ("CHAPTER IV", "Chapter 12", "BOOK THE FIRST", "VOLUME I", "第十二回  甄士隐梦幻识通灵", "第３章", "楔子",
                    "[Emma by Jane Austen 1816]", "迈向充满希望的新世纪——一九九八年新年讲话（附图片１张）"):  # fmt: skip
        assert is_heading(heading), heading
    for prose in ("It was a fine day.", "“Yes,” said he.", "他说：“你好。”", "and the wind blew,"):
        assert not is_heading(prose), prose
    assert not is_heading("A short stanza line", n_lines=3)


# ---- formats and documents ------------------------------------------------------------------------------


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def test_detect_format_on_the_real_corpora(shared_data):
    pretrain = shared_data / "pretrain"
    expected = {"en/brown.txt": "google", "en/gutenberg/austen-emma.txt": "paragraphs",
                "en/gutenberg/milton-paradise.txt": "paragraphs", "zh/peoples_daily_199801.txt": "lines",
                "zh/红楼梦.txt": "paragraphs", "zh/三国演义.txt": "paragraphs"}  # fmt: skip
    for name, fmt in expected.items():
        assert detect_format(pretrain / name, sniff(pretrain / name)) == fmt, name


def test_google_format_documents(tmp_path):
    path = write(tmp_path / "g.txt", "First doc one.\nFirst doc two.\n\n\nSecond doc one.\n  \nThird one.\nThird two.\n")
    docs = list(iter_documents([path], input_format="google"))
    assert [d.sentences() for d in docs] == [["First doc one.", "First doc two."], ["Second doc one."],
                                             ["Third one.", "Third two."]]  # fmt: skip
    assert docs[2].source == f"{path} line 7"


def test_paragraphs_join_wrapped_lines_and_split_at_chapters(tmp_path):
    text = ("[A Book by Someone]\r\n\r\nCHAPTER I\r\n\r\nIt was a dark night. The wind\r\nblew hard.\r\n\r\n"
            "She waited.\r\n\r\nCHAPTER II\r\n\r\nMorning came.  Birds sang.\r\n")  # fmt: skip
    docs = list(read_documents([write(tmp_path / "book.txt", text)]))
    assert docs == [["[A Book by Someone]", "CHAPTER I", "It was a dark night.", "The wind blew hard.", "She waited."],
                    ["CHAPTER II", "Morning came.", "Birds sang."]]  # fmt: skip


def test_chinese_novel_chapters_and_wrapped_lines(tmp_path):
    text = ("《书》作者\r\n\r\n第一回 开篇\r\n\r\n    话说天下大势。分久必合，\r\n合久必分。\r\n\r\n    又一段。\r\n\r\n"
            "第二回 再续\r\n\r\n    后来如何？且听下回分解。\r\n")  # fmt: skip
    docs = list(read_documents([write(tmp_path / "novel.txt", text)]))
    assert docs == [["《书》作者", "第一回 开篇", "话说天下大势。", "分久必合，合久必分。", "又一段。"],
                    ["第二回 再续", "后来如何？", "且听下回分解。"]]  # fmt: skip


def test_lines_format_titles_start_documents(tmp_path):
    text = "新年讲话\n江泽民\n同胞们：今天很好。我们很高兴。\n明天更好。\n另一篇报道\n这是第二篇。内容很多。\n"
    docs = list(read_documents([write(tmp_path / "news.txt", text)]))
    assert docs == [["新年讲话", "江泽民", "同胞们：今天很好。", "我们很高兴。", "明天更好。"],
                    ["另一篇报道", "这是第二篇。", "内容很多。"]]  # fmt: skip


def test_long_prose_is_cut_into_documents_at_paragraphs(tmp_path):
    paragraph = "This is a sentence of prose. " * 20  # ~580 characters
    text = "\n\n".join([paragraph] * 50)
    docs = list(iter_documents([write(tmp_path / "p.txt", text)], max_document_chars=3000))
    assert len(docs) == 9 and all(len(d.paragraphs) == 6 for d in docs[:-1])


def test_jsonl_and_gzip(tmp_path):
    rows = [{"text": "One. Two.\nThree."}, {"body": "no text field"}, {"text": 7}, {"text": "Four. Five."}]
    lines = "\n".join(json.dumps(r) for r in rows) + "\n{broken\n"
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(lines)
    report = ReadReport()
    docs = list(read_documents([path], report=report))
    assert docs == [["One.", "Two.", "Three."], ["Four.", "Five."]]
    assert report.skipped == {"no field 'text'": 1, "field 'text' is not a string": 1, "invalid JSON": 1}
    write(tmp_path / "d.jsonl", json.dumps({"body": "Six. Seven."}) + "\n")
    assert list(read_documents([tmp_path / "d.jsonl"], text_field="body")) == [["Six.", "Seven."]]


def test_folders_are_read_recursively_sorted_and_hidden_files_skipped(tmp_path):
    for name in ("b/2.txt", "a/z.txt", "a/sub/1.txt", "c.txt", ".hidden.txt", "a/.git/x.txt"):
        write(tmp_path / name, "x.\n")
    assert [p.relative_to(tmp_path).as_posix() for p in list_files([tmp_path])] == [
        "a/sub/1.txt", "a/z.txt", "b/2.txt", "c.txt"]  # fmt: skip


def test_reading_streams(tmp_path):
    """The first document comes before the rest of the file is read."""
    path = write(tmp_path / "big.txt", "\n\n".join("Sentence one here. Sentence two here." for _ in range(200_000)))
    report = ReadReport()
    docs = iter_documents([path], input_format="paragraphs", report=report, max_document_chars=100)
    next(docs)
    assert report.bytes < path.stat().st_size / 10


# ---- bad input ------------------------------------------------------------------------------------------------


def test_bad_files_and_lines_are_skipped_and_counted(tmp_path):
    write(tmp_path / "a_empty.txt", "")
    write(tmp_path / "b_blank.txt", "\n  \n\n")
    write(tmp_path / "c_binary.bin", b"PK\x03\x04\x00\x00binary")
    write(tmp_path / "d_latin1.txt", b"Good line one.\nGood line two.\n" + b"caf\xe9 bad.\nGood line four.\n")
    write(tmp_path / "e_nul.txt", b"x" * 70_000 + b"\nFine line.\nbad\x00line.\nAnother fine.\n")  # NUL past the sniff
    write(tmp_path / "f_gz.txt.gz", b"\x1f\x8b\x08\x00broken gzip")
    report = ReadReport()
    docs = list(read_documents([tmp_path], input_format="google", report=report))
    assert docs[0] == ["Good line one.", "Good line two.", "Good line four."]
    assert report.skipped == {"not valid UTF-8": 1, "NUL byte (binary data)": 1}
    reasons = {Path(f["file"]).name: f["reason"] for f in report.skipped_files}
    assert reasons["a_empty.txt"] == reasons["b_blank.txt"] == "empty file (no text)"
    assert reasons["c_binary.bin"] == "binary file (NUL byte at byte 4)"
    assert reasons["f_gz.txt.gz"].startswith("cannot read")
    assert f"{tmp_path / 'd_latin1.txt'} line 3: not valid UTF-8 (invalid continuation byte at byte 3 of the line)" \
        in report.messages  # fmt: skip
    assert any(m.startswith(f"{tmp_path / 'e_nul.txt'} line 3: NUL byte") for m in report.messages)
    assert "skipped 4 file(s)" in report.summary()


@pytest.mark.parametrize("name, content, message", [
    ("empty.txt", b"", r"empty.txt: empty file \(no text\)"),
    ("binary.dat", b"\x00\x01\x02", r"binary.dat: binary file \(NUL byte at byte 0\)"),
    ("latin1.txt", b"ok.\n\xff\xfe bad\n", r"latin1.txt line 2: not valid UTF-8"),
    ("rows.jsonl", b'{"text": "a."}\n{"txt": "b."}\n', r"rows.jsonl line 2: no field 'text'"),
])  # fmt: skip
def test_stop_on_error_names_file_and_line(tmp_path, name, content, message):
    write(tmp_path / name, content)
    with pytest.raises(BertkitError, match=message):
        list(iter_documents([tmp_path / name], on_error="stop"))


def test_missing_inputs_and_bad_options(tmp_path):
    with pytest.raises(BertkitError, match="nothing.txt: no such file or folder"):
        list(iter_documents([tmp_path / "nothing.txt"]))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(BertkitError, match="empty_dir: folder holds no files"):
        list(iter_documents([tmp_path / "empty_dir"]))
    with pytest.raises(BertkitError, match="input format 'xml' is not one of"):
        list(iter_documents([tmp_path], input_format="xml"))
    with pytest.raises(BertkitError, match="on_error 'ignore' is not one of"):
        list(iter_documents([tmp_path], on_error="ignore"))

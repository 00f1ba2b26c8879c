"""Readers on the real data sets (counts as DATA.md gives them), on bad input, and the seeded split."""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.tasks import get_task, read_conll, read_jsonl, read_squad, read_table, split

COUNTS = [
    # (task, file, kept, skipped)
    ("classify", "sst2/train.tsv", 67_349, 0),
    ("classify", "sst2/dev.tsv", 872, 0),
    ("pair", "rte/train.tsv", 2_490, 0),
    ("pair", "rte/dev.tsv", 277, 0),
    ("pair", "mrpc/msr_paraphrase_train.txt", 4_076, 0),
    ("pair", "mrpc/msr_paraphrase_test.txt", 1_725, 0),
    ("classify", "waimai_10k/waimai_10k.csv", 11_987, 0),
    ("pair", "ocnli/train.10k.json", 9_985, 15),  # 10,000 rows, 15 of them labelled "-"
    ("pair", "ocnli/dev.json", 2_950, 50),  # 3,000 rows, 50 labelled "-"
    ("qa", "squad_v1.1/dev-v1.1.json", 10_570, 0),
    ("qa", "cmrc2018/trial.json", 1_002, 0),
    ("ner", "conll2003/eng.train", 14_041, 0),
    ("ner", "conll2003/eng.testa", 3_250, 0),
    ("ner", "conll2003/eng.testb", 3_453, 0),
    ("ner", "msra_ner/train.bio.txt", 50_658, 0),
    ("ner", "msra_ner/test.bio.txt", 3_442, 0),
]


@pytest.mark.parametrize(("task", "name", "kept", "skipped"), COUNTS, ids=[c[1] for c in COUNTS])
@pytest.mark.slow
def test_real_files_read_to_the_documented_counts(shared_data: Path, task: str, name: str, kept: int, skipped: int):
    data = get_task(task).read(shared_data / name)
    assert len(data) == kept == data.report.kept
    assert data.report.total_skipped == skipped


def test_cmrc_dev_counts_its_wrong_offsets_and_missing_answers(shared_data: Path):
    data = read_squad(shared_data / "cmrc2018" / "dev.json")
    assert len(data) == 3_219  # every question keeps at least one answer found in its context
    report = data.report
    assert report.skipped["answer not in context"] == 193
    assert report.fixed["answer offset relocated"] == 7
    assert "question DEV_" in report.summary()
    for e in data:
        for a in e.answers:
            assert e.context[a.start : a.start + len(a.text)] == a.text
        assert len(e.gold_texts) == 3  # scoring keeps every annotated text, as the official script


def test_squad_answers_sit_at_their_offsets_and_whole_words(shared_data: Path):
    data = read_squad(shared_data / "squad_v1.1" / "dev-v1.1.json")
    assert data.impossible == 0
    assert dict(data.report.fixed) == {"answer moved out of a longer word": 180}
    golden = next(e for e in data if e.qid == "56be4db0acb8001400a502f0")  # "gold" was found inside "golden"
    a = golden.answers[0]
    assert golden.context[a.start : a.start + len(a.text)] == a.text
    assert not golden.context[a.start + len(a.text)].isalnum()


def test_mrpc_bom_and_crlf_are_handled(shared_data: Path):
    data = read_table(shared_data / "mrpc" / "msr_paraphrase_train.txt")
    first, last = data[0], data[-1]
    assert first.label == "1" and first.text.startswith("Amrozi accused")
    assert '"the witness"' in first.text  # TSV read without quoting
    # the last line as the file has it (Quality, #1 ID, #2 ID, #1 String, #2 String), CRLF dropped
    fields = (shared_data / "mrpc" / "msr_paraphrase_train.txt").read_bytes().decode("utf-8").split("\r\n")[-2].split("\t")
    assert (last.label, last.text, last.pair) == (fields[0], fields[3], fields[4]) and not last.pair.endswith("\r")
    assert last.line == len(data) + 1 == 4_077  # after the header


def test_gluetsv_and_waimai_columns(shared_data: Path):
    sst = read_table(shared_data / "sst2" / "dev.tsv", fields=("text", "label"))
    assert sst[0].pair is None and sst[0].label == "1" and sst[0].line == 2
    rte = read_table(shared_data / "rte" / "dev.tsv")
    first = (shared_data / "rte" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1].split("\t")  # sentence1 sentence2 label idx
    assert (rte[0].text, rte[0].pair, rte[0].label) == tuple(first[:3])
    waimai = read_table(shared_data / "waimai_10k" / "waimai_10k.csv", fields=("text", "label"))
    assert {e.label for e in waimai} == {"0", "1"}
    assert sum(e.label == "1" for e in waimai) == 4_000
    quoted = next(e for e in waimai if "," in e.text)  # a quoted review holding commas stays whole
    raw = (shared_data / "waimai_10k" / "waimai_10k.csv").read_text(encoding="utf-8").splitlines()[quoted.line - 1]
    assert [quoted.label, quoted.text] == next(csv.reader([raw]))  # label,review


def test_conll_schemes_docstart_and_nfkc(shared_data: Path):
    conll = read_conll(shared_data / "conll2003" / "eng.train")
    assert conll.scheme == "IOB1"
    assert all("-DOCSTART-" not in e.words for e in conll)
    assert conll[0].words[:2] == ("EU", "rejects") and conll[0].tags[0] == "I-ORG"
    msra = read_conll(shared_data / "msra_ner" / "test.bio.txt", normalize="NFKC")
    assert msra.scheme == "BIO"  # the training file's 6 stray chunk-opening I- tags do not make it IOB1
    raw = read_conll(shared_data / "msra_ner" / "test.bio.txt")
    full_width = sum(w in "０１２３４５６７８９" for e in raw for w in e.words)
    assert full_width == 3_072
    assert not any(w in "０１２３４５６７８９" for e in msra for w in e.words)
    assert [e.words for e in msra] == [tuple(unicodedata.normalize("NFKC", w) for w in e.words) for e in raw]
    assert [e.tags for e in msra] == [e.tags for e in raw]


def test_bmes_and_bilou_read_as_bioes(tmp_path: Path):
    bioes = read_conll(_write(tmp_path / "bioes.txt", "小 B-PER\n明 E-PER\n在 O\n京 S-LOC\n\n北 B-ORG\n大 I-ORG\n学 E-ORG\n"))
    bmes = read_conll(_write(tmp_path / "bmes.txt", "小 B-PER\n明 E-PER\n在 O\n京 S-LOC\n\n北 B-ORG\n大 M-ORG\n学 E-ORG\n"))
    bilou = read_conll(_write(tmp_path / "bilou.txt", "小 B-PER\n明 L-PER\n在 O\n京 U-LOC\n\n北 B-ORG\n大 I-ORG\n学 L-ORG\n"))
    assert bmes.scheme == bilou.scheme == bioes.scheme == "BIOES"
    assert [e.tags for e in bmes] == [e.tags for e in bilou] == [e.tags for e in bioes]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_split_is_fixed_disjoint_and_complete(shared_data: Path):
    data = read_table(shared_data / "waimai_10k" / "waimai_10k.csv", fields=("text", "label"))
    train, dev, test = split(data, (0.8, 0.1, 0.1), seed=13)
    assert (len(train), len(dev), len(test)) == (9_589, 1_199, 1_199)
    lines = [{e.line for e in part} for part in (train, dev, test)]
    assert not (lines[0] & lines[1]) and not (lines[1] & lines[2]) and not (lines[0] & lines[2])
    assert len(lines[0] | lines[1] | lines[2]) == len(data)
    again = split(data, (0.8, 0.1, 0.1), seed=13)
    assert [e.line for e in again[1]] == [e.line for e in dev]
    assert [e.line for e in split(data, seed=14)[1]] != [e.line for e in dev]
    assert [e.line for e in dev] == sorted(e.line for e in dev)  # each part keeps file order


# ---------------------------------------------------------------------------------------------------
# Bad input


def test_empty_and_header_only_files(tmp_path: Path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n")
    for read in (read_table, read_jsonl, read_squad, read_conll):
        with pytest.raises(BertkitError, match=r"empty\.tsv: file is empty"):
            read(empty)
    header = tmp_path / "header.tsv"
    header.write_text("sentence\tlabel\n")
    with pytest.raises(BertkitError, match=r"header\.tsv: has a header but no rows"):
        read_table(header)


def test_wrong_number_of_columns_is_named_or_skipped(tmp_path: Path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\ngood one\t1\nbad\tone\t0\nfine\t0\n")
    with pytest.raises(BertkitError, match=r"train\.tsv line 3: wrong number of columns: 3, expected 2"):
        read_table(path)
    data = read_table(path, bad_rows="skip")
    assert len(data) == 2 and data.report.skipped["wrong number of columns"] == 1
    assert "line 3" in data.report.summary()


def test_conll_line_with_wrong_columns(tmp_path: Path):
    path = tmp_path / "eng.dev"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-PER\n\nBob NNP I-NP I-PER\n")
    with pytest.raises(BertkitError, match=r"eng\.dev line 6: wrong number of columns: 3, expected 4"):
        read_conll(path)
    data = read_conll(path, bad_rows="skip")
    assert [e.words for e in data] == [("EU", "rejects"), ("Bob",)]
    assert data.report.skipped["wrong number of columns"] == 1
    bad_tag = tmp_path / "bad.tag"
    bad_tag.write_text("EU X\n")
    with pytest.raises(BertkitError, match=r"bad\.tag line 1: malformed tag 'X'"):
        read_conll(bad_tag)


def test_jsonl_line_that_is_not_json(tmp_path: Path):
    path = tmp_path / "dev.json"
    path.write_text('{"sentence1": "a", "sentence2": "b", "label": "neutral"}\n{"sentence1": "a",\n'
                    '{"sentence1": "c", "sentence2": "d", "label": "-"}\n[1, 2]\n')
    with pytest.raises(BertkitError, match=r"dev\.json line 2: not JSON"):
        read_jsonl(path)
    data = read_jsonl(path, bad_rows="skip")
    assert len(data) == 1
    assert data.report.skipped == {"not JSON": 1, "no gold label ('-')": 1, "not a JSON object": 1}


def test_squad_answer_not_in_context_is_a_counted_skip(tmp_path: Path):
    path = tmp_path / "qa.json"
    path.write_text("""{"data": [{"title": "t", "paragraphs": [{"context": "Paris is the capital of France.",
      "qas": [{"id": "q1", "question": "Capital?", "answers": [{"text": "Paris", "answer_start": 3}]},
              {"id": "q2", "question": "Country?", "answers": [{"text": "Spain", "answer_start": 0},
                                                               {"text": "France", "answer_start": 24}]},
              {"id": "q3", "question": "River?", "answers": [{"text": "Seine", "answer_start": 0}]}]}]}]}""")
    data = read_squad(path)
    assert [e.qid for e in data] == ["q1", "q2"]
    assert data[0].answers[0].start == 0  # wrong offset moved to where "Paris" is
    assert data[1].gold_texts == ("Spain", "France") and len(data[1].answers) == 1
    assert data.report.skipped == {"answer not in context": 2, "question without an answer in its context": 1}
    assert data.report.fixed == {"answer offset relocated": 1}
    assert "question q3" in data.report.summary()
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n  {"title": }\n]}')
    with pytest.raises(BertkitError, match=r"broken\.json line 2: not valid JSON"):
        read_squad(broken)


def test_headerless_table_and_column_mapping(tmp_path: Path):
    path = tmp_path / "plain.tsv"
    path.write_text("a fine film\t1\na dull film\t0\nsomething else\t1\n")
    data = read_table(path, fields=("text", "label"))
    assert [e.label for e in data] == ["1", "0", "1"] and data[0].line == 1
    swapped = tmp_path / "swapped.csv"
    swapped.write_text("1,good\n0,bad\n")
    data = read_table(swapped, fields=("text", "label"), columns={"text": 1, "label": 0})
    assert [(e.text, e.label) for e in data] == [("good", "1"), ("bad", "0")]
    with pytest.raises(BertkitError, match=r"no column named 'review'"):
        read_table(tmp_path / "plain.tsv", header=True, columns={"text": "review"})


def test_headerless_layouts_are_guessed_or_refused(tmp_path: Path):
    two = tmp_path / "two.tsv"
    two.write_text("a fine film\t1\na dull film\t0\n")
    assert [(e.text, e.pair, e.label) for e in read_table(two)] == [("a fine film", None, "1"), ("a dull film", None, "0")]
    three = tmp_path / "three.tsv"
    three.write_text("0\tA man sleeps.\tA person rests.\n1\tA dog runs.\tA cat sits.\n1\tX.\tY.\n")
    got = read_table(three, fields=("text", "pair", "label"))
    assert (got[0].label, got[0].text, got[0].pair) == ("0", "A man sleeps.", "A person rests.")
    with pytest.raises(BertkitError, match=r"no header and 3 columns"):
        read_table(three, fields=("text", "label"))

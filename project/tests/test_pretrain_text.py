"""Offline checks of the pretraining corpus: cleaners, the build, the held-out pin (no downloads)."""
import fetch_pretrain_text as fpt
import pytest

import common

GCIDE_ENTRY = """Abandon \\A*ban"don\\ ([.a]*b[a^]n"d[u^]n), v. t. [imp. & p. p.
   {Abandoned} (-d[u^]nd); p. pr. & vb. n. {Abandoning}.] [OF.
   abandoner; a (L. ad) + bandon permission. See {Ban}.]
   1. To cast or drive out; to banish; to expel; to reject.
      [Obs.]
      [1913 Webster]

            That he might . . . abandon them from him. --Udall.
      [1913 Webster]

   2. To give up absolutely; to forsake entirely.
      [1913 Webster]

   Syn: To give up; yield; forego; cede.
"""

REST = """Built-in Functions
==================

.. function:: abs(x)

   Return the *absolute* value of a number, see :func:`~math.fabs` and
   :ref:`the tutorial <tut-numbers>`.  For example::

      >>> abs(-2)
      2

.. code-block:: python

   print("never prose")

.. note::

   Use ``abs`` on `numbers <https://example.org>`_ only.
"""


def test_gcide_entry_keeps_definitions_and_quotes_only():
    lines = fpt.gcide_entry(GCIDE_ENTRY)
    assert lines == [
        "To cast or drive out; to banish; to expel; to reject.",
        "That he might... abandon them from him.",
        "To give up absolutely; to forsake entirely.",
    ]
    text = " ".join(lines)
    for junk in ("[", "]", "\\", "{", "Webster", "Udall", "Syn", "OF.", "v. t."):
        assert junk not in text


def test_gcide_entries_use_byte_offsets():
    data = "caf\u00e9 x\nAbandon y\n".encode("utf-8")
    # "Abandon y\n" starts at byte 8 (the e-acute is 2 bytes); dictd base64: I = 8, K = 10
    assert list(fpt.gcide_entries(data, "Abandon\tI\tK\n")) == ["Abandon y\n"]


def test_rest_prose_drops_code_and_markup():
    paras = fpt.rest_prose(REST)
    assert "Return the absolute value of a number, see math.fabs and the tutorial. For example:" in paras
    assert "Use abs on numbers only." in paras
    text = " ".join(paras)
    assert "print" not in text and ">>>" not in text and "===" not in text and "abs(-2)" not in text


def test_filters_and_heldout_are_deterministic():
    assert fpt.is_prose("This is a real sentence.")
    assert not fpt.is_prose("too short")
    assert not fpt.is_prose("12 34 56 78 -- == ++")
    long = " ".join(["The cat sat on the mat."] * 100)
    parts = fpt.split_long(long)
    assert len(parts) > 1 and " ".join(parts) == long
    assert fpt.is_heldout("x" * 10) == fpt.is_heldout("x" * 10)
    share = sum(fpt.is_heldout(f"line {i}", 5) for i in range(20000)) / 20000
    assert 0.003 < share < 0.007
    assert all(fpt.is_heldout(f"line {i}", 12) for i in range(20000) if fpt.is_heldout(f"line {i}", 5))


def test_brown_split_is_shared():
    assert [common.split_of(i) for i in range(10)] == ["train"] * 8 + ["dev", "test"]


POD = """=head1 NAME

perlfoo - a B<bold> test

=head2 Sorting

Sort with C<< $a <=> $b >> and see L<the docs|perlfunc/sort> or L<perlop/"Shift">, E<lt>tagE<gt> X<sort>I<now>.

    my @sorted = sort { $a <=> $b } @list;

=over 4

=item open FILEHANDLE,EXPR

Opens the file whose name is given.

=back

=begin html

<p>Not this paragraph.</p>

=end html

=cut

sub not_pod { 1 }

=pod

Back in the documentation.
"""


def test_pod_prose_keeps_ordinary_paragraphs_only():
    assert fpt.pod_prose(POD) == [
        "perlfoo - a bold test",
        "Sort with $a <=> $b and see the docs or Shift, <tag> now.",
        "Opens the file whose name is given.",
        "Back in the documentation.",
    ]


def _fake_sources(monkeypatch, extra: bool):
    """Two tiny default sources and two extra ones, one line shared across them."""
    lines = {
        "a": [f"Line {i} of the first source, a real sentence." for i in range(400)],
        "b": [f"Line {i} of the second source, also prose." for i in range(400)]
        + ["Line 3 of the first source, a real sentence."],
        "x": [f"Line {i} of an extra source, new prose." for i in range(400)]
        + ["Line 5 of the second source, also prose."],
        "y": ["Short.", f"Line {7} of another extra source, more prose."],
    }
    monkeypatch.setattr(fpt, "SOURCES", {k: (lambda assets, k=k: lines[k]) for k in "ab"})
    monkeypatch.setattr(fpt, "EXTRA_SOURCES", {k: (lambda assets, k=k: lines[k]) for k in "xy"})
    checked = []  # the held-out pin is today's corpus's, not these sources': record the check
    monkeypatch.setattr(fpt, "check_heldout", lambda path, names, per_mille, per_source: checked.append(
        (path.name, names, sorted(per_source))))
    return checked


def _build(tmp_path, name, extra=""):
    out = tmp_path / name
    fpt.main(out, tmp_path / "assets", ",".join(fpt.SOURCES), extra, fpt.HELDOUT_PER_MILLE)
    return out


def test_extra_sources_leave_the_default_output_unchanged(tmp_path, monkeypatch):
    import json

    checked = _fake_sources(monkeypatch, extra=True)
    plain = _build(tmp_path, "plain")
    more = _build(tmp_path, "more", "x,y")
    assert checked == [("heldout.txt", ["a", "b"], ["a", "b"])] * 2
    for path in ("train/a.txt", "train/b.txt", "heldout.txt"):
        assert (plain / path).read_bytes() == (more / path).read_bytes(), path
    assert not (plain / "train/x.txt").exists() and not (plain / "heldout_new.txt").exists()
    stats = json.loads((more / "stats.json").read_text())
    assert stats["total"] == json.loads((plain / "stats.json").read_text())["total"]
    # The extra source is de-duplicated against the default ones: its copy of b's line is dropped.
    assert stats["extra_sources"]["x"]["duplicates"] == 1
    assert "Line 5 of the second source" not in (more / "train/x.txt").read_text()
    new_held = (more / "heldout_new.txt").read_text().splitlines()
    assert new_held and all("extra source" in line for line in new_held)
    assert stats["extra_total"]["heldout_lines"] == len(new_held)
    assert set(stats["files"]) >= {"train/x.txt", "heldout_new.txt", "heldout.txt"}
    # A later build without the extra sources removes their files again.
    _build(tmp_path, "more")
    assert not (more / "train/x.txt").exists() and not (more / "heldout_new.txt").exists()


def test_a_changed_heldout_slice_stops_the_build(tmp_path, monkeypatch):
    path = tmp_path / "heldout.txt"
    path.write_text("A held-out line that is not today's.\n")
    with pytest.raises(SystemExit, match="not the pinned held-out slice"):
        fpt.check_heldout(path, list(fpt.SOURCES), fpt.HELDOUT_PER_MILLE)
    per_source = dict(fpt.HELDOUT_SOURCE_SHA256, python_doc="0" * 64)
    with pytest.raises(SystemExit, match="the text of python_doc changed"):
        fpt.check_heldout(path, list(fpt.SOURCES), fpt.HELDOUT_PER_MILLE, per_source)
    # Another selection of sources or another share is another slice by design.
    fpt.check_heldout(path, list(fpt.SOURCES)[:3], fpt.HELDOUT_PER_MILLE)
    fpt.check_heldout(path, list(fpt.SOURCES), 5)
    monkeypatch.setattr(fpt, "HELDOUT_SHA256", fpt.sha256_of(path))
    fpt.check_heldout(path, list(fpt.SOURCES), fpt.HELDOUT_PER_MILLE)


def test_unknown_sources_are_refused(tmp_path):
    import typer

    with pytest.raises(typer.BadParameter, match="linux_doc.*--sources"):
        fpt.main(tmp_path / "o", tmp_path / "a", "sotu,linux_doc", "", 12)
    with pytest.raises(typer.BadParameter, match="--extra-sources"):
        fpt.main(tmp_path / "o", tmp_path / "a", "sotu", "wiki", 12)


def test_the_committed_python_doc_pin_is_the_slices_part():
    lines = fpt.read_pin("python_doc")
    assert len(lines) == 484 and all(fpt.is_heldout(line) for line in lines)


def test_a_pin_keeps_the_slice_when_the_package_text_changes(tmp_path, monkeypatch):
    """A source's held-out part comes from its pin: the same bytes from the pinned text, and
    still the same slice from a changed text (a held-out line gone, a new one that the hash
    rule holds out); train/ gets only lines the hash rule does not hold out."""
    import json

    old = [f"Line {i} of the pinned source, a real sentence." for i in range(400)]
    held = [line for line in old if fpt.is_heldout(line)]
    new_held = next(f"A changed line {i} of the pinned source." for i in range(10000)
                    if fpt.is_heldout(f"A changed line {i} of the pinned source."))
    new = [line for line in old if line != held[0]] + [new_held, "A new training line, plain prose here."]
    text = {"p": old}
    checked = _fake_sources(monkeypatch, extra=False)
    monkeypatch.setattr(fpt, "SOURCES", dict(fpt.SOURCES, p=lambda assets: text["p"]))
    plain = _build(tmp_path, "plain")  # no pin: the hash rule alone
    pin = tmp_path / "pin.txt"
    pin.write_text("".join(line + "\n" for line in held), encoding="utf-8")
    monkeypatch.setattr(fpt, "PINNED_HELDOUT", {"p": pin})
    monkeypatch.setattr(fpt, "HELDOUT_SOURCE_SHA256", {"p": fpt.sha256_of(pin)})
    same = _build(tmp_path, "same")
    for path in ("heldout.txt", "train/a.txt", "train/b.txt", "train/p.txt"):
        assert (plain / path).read_bytes() == (same / path).read_bytes(), path
    text["p"] = new
    changed = _build(tmp_path, "changed")
    assert (changed / "heldout.txt").read_bytes() == (plain / "heldout.txt").read_bytes()
    train = (changed / "train/p.txt").read_text().splitlines()
    assert new_held not in train and held[0] not in train and "A new training line, plain prose here." in train
    stats = json.loads((changed / "stats.json").read_text())["sources"]["p"]
    assert (stats["pin_missing"], stats["pin_dropped"], stats["heldout_lines"]) == (1, 1, len(held))
    assert len(checked) == 3
    # Another share is another slice by design: the pin is not used.
    other = tmp_path / "other"
    fpt.main(other, tmp_path / "assets", ",".join(fpt.SOURCES), "", 5)
    assert "pin_missing" not in json.loads((other / "stats.json").read_text())["sources"]["p"]
    # An edited pin is refused.
    pin.write_text("An edited line.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="not the pinned held-out lines of p"):
        _build(tmp_path, "edited")


def test_split_heldout_cuts_each_source_back_out_by_kind(tmp_path, monkeypatch):
    import split_heldout

    _fake_sources(monkeypatch, extra=True)
    built = _build(tmp_path, "built", "x,y")
    monkeypatch.setattr(split_heldout, "REFERENCE_SOURCES", frozenset({"b"}))
    written = split_heldout.split(built, tmp_path / "parts")
    assert sorted(written) == ["new/x.txt", "prose/a.txt", "reference/b.txt"]  # y's one line is too short
    parts = tmp_path / "parts"
    held = (built / "heldout.txt").read_text(encoding="utf-8")
    assert (parts / "prose/a.txt").read_text(encoding="utf-8") + (parts / "reference/b.txt").read_text(
        encoding="utf-8") == held
    assert all("first source" in line for line in (parts / "prose/a.txt").read_text().splitlines())
    assert (parts / "new/x.txt").read_text() == (built / "heldout_new.txt").read_text()
    assert written["prose/a.txt"]["lines"] == len((parts / "prose/a.txt").read_text().splitlines()) > 0
    # Held-out text that is not the build stats.json describes is refused, naming the file.
    (built / "heldout.txt").write_text(held.replace("first", "1st", 1), encoding="utf-8")
    with pytest.raises(SystemExit, match="heldout.txt: the held-out lines of a do not match"):
        split_heldout.split(built, tmp_path / "parts2")
    (built / "heldout.txt").write_text(held + "One more line of text here.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="different builds"):
        split_heldout.split(built, tmp_path / "parts2")
    with pytest.raises(SystemExit, match="build the corpus first"):
        split_heldout.split(tmp_path / "nothing", tmp_path / "parts2")


def test_split_heldout_kinds_name_real_sources():
    import split_heldout

    assert split_heldout.REFERENCE_SOURCES <= set(fpt.SOURCES) | set(fpt.EXTRA_SOURCES)
    assert [split_heldout.kind_of(s) for s in fpt.SOURCES].count("prose") == 8

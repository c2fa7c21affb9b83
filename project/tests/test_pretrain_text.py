"""Offline checks of the pretraining-corpus cleaners (no downloads)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "project" / "scripts"))

import fetch_brown  # noqa: E402
import fetch_pretrain_text as fpt  # noqa: E402

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
    assert [fetch_brown.split_of(i) for i in range(10)] == ["train"] * 8 + ["dev", "test"]

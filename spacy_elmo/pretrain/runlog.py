"""``OUTPUT/log.jsonl``: one JSON record a line (start, train, eval,
checkpoint, stopped, end), written by rank 0; the learning curve and the
model card are drawn from it."""
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, List

from .errors import PretrainError

logger = logging.getLogger(__name__)


def read_log(path: Path) -> List[Dict[str, Any]]:
    """The records of a ``log.jsonl``; a file that is not one (binary, not
    UTF-8, a line that is not a JSON object) is a PretrainError naming the
    file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PretrainError(f"{path} is damaged or not a run log: not UTF-8 text (byte {err.start})") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise PretrainError(
                f"{path}, line {number}: not a JSON record: the log is damaged. Remove or repair that line "
                "(each line of log.jsonl is one JSON object)"
            )
        records.append(record)
    return records


class RunLog:
    """Appends records to ``log.jsonl`` (a no-op on ranks other than 0)."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def write(self, **record: Any) -> None:
        if not self.enabled:
            return
        record = {"time": time.time(), **record}
        try:
            with open(self.path, "a", encoding="utf-8") as fout:
                fout.write(json.dumps(record) + "\n")
        except OSError as err:
            raise PretrainError(
                f"cannot write the log {self.path} ({err.strerror or err}); free disk space and continue "
                "with --resume (the last checkpoint is intact)"
            ) from err

    def rollback(self, step: int) -> int:
        """On resume from the checkpoint of ``step``: drop the records of
        later steps (written after that checkpoint, by the run that went on
        and was lost), so that the log and the learning curve show each
        step once. Returns how many were dropped (also logged)."""
        if not self.enabled or not self.path.exists():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = []
        for line in lines:
            try:
                later = int(json.loads(line).get("step", 0)) > step
            except (ValueError, TypeError, AttributeError):
                later = False  # not ours to judge: keep it
            if not later:
                kept.append(line)
        dropped = len(lines) - len(kept)
        if dropped:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(kept), encoding="utf-8")
            os.replace(tmp, self.path)
            logger.warning("log.jsonl: dropped %d records after step %d (rolled back by the resume)", dropped, step)
        return dropped

"""Where the tests find the repository's files: one home, so a test file's
own folder never matters."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
PARITY = FIXTURES / "elmo-parity"
ALLENNLP = FIXTURES / "allennlp_elmo"
EXAMPLES = REPO / "examples"
CONFIGS = REPO / "configs"
PACKAGE = REPO / "spacy_elmo"

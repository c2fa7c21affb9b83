from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="spacy_elmo",
    version="0.1.0",
    description="ELMo (deep contextualized word representations) for spaCy v3, on a pure-PyTorch biLM",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["spacy_elmo", "spacy_elmo.*"]),
    include_package_data=True,
    package_data={"spacy_elmo": ["py.typed", "models/english/*", "resources/*"]},
    install_requires=[
        # torch is deliberately a range: install the build you want first
        # (see README: the CPU build on a CPU-only machine).
        "torch>=2.1",
        "numpy>=1.21",
        "h5py>=3.0",
        "spacy>=3.7,<4.0",
        "thinc>=8.2,<9.0",
        "srsly>=2.4",
        "typer>=0.9",
        "tqdm>=4.60",
    ],
    extras_require={
        "test": ["pytest>=7", "matplotlib>=3.5"],
        "pretrain": ["matplotlib>=3.5"],
    },
    entry_points={
        "console_scripts": ["spacy-elmo = spacy_elmo.__main__:main"],
        "spacy_factories": ["elmo = spacy_elmo.pipeline:make_elmo"],
        "spacy_architectures": [
            "spacy_elmo.ElmoBiLM.v2 = spacy_elmo.architectures:ElmoBiLM",
            "spacy_elmo.ElmoListener.v1 = spacy_elmo.architectures:ElmoListener",
            "spacy_elmo.ElmoMix.v1 = spacy_elmo.architectures:ElmoMix",
            "spacy_elmo.ElmoInputOutput.v1 = spacy_elmo.architectures:ElmoInputOutput",
            "spacy_elmo.ElmoTok2Vec.v1 = spacy_elmo.architectures:ElmoTok2Vec",
        ],
        "spacy_span_getters": [
            "spacy_elmo.sent_or_strided_spans.v1 = spacy_elmo.architectures:configure_sent_or_strided_spans",
            "spacy_elmo.strided_spans.v1 = spacy_elmo.architectures:configure_strided_spans",
        ],
    },
)

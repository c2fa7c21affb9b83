"""Weight layouts of published model families beside the bilm-tf hdf5 one
(:mod:`spacy_elmo.bilm.weights`): ELMoForManyLangs directories (:mod:`.efml`)."""

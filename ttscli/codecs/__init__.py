"""Speech codecs shared by several model families (a family never imports another family)."""

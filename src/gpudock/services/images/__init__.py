"""Images: the catalog and pre-flight, who may use which image, builds,
the validation gate."""

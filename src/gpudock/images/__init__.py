"""Images, whatever the engine: the built-in catalog (`catalog`), what runs on
which GPU (`compat`), references as the registry grammar reads them
(`references`), and the local base image gpudock builds itself (`base_image`)."""

"""Container images gpudock builds itself: the local debootstrap base image."""

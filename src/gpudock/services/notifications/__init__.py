"""What users are told, and how it reaches them: the outbox (`outbox`), the
endpoints they keep (`endpoints`), the delivery worker (`delivery`) with its
signing and senders, and GPU watches (`gpu_watches`)."""

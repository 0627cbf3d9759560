"""What users ask of their instances (create, start, stop, delete), the status
machine every change goes through, sizing, and how an instance maps onto
runtime objects."""

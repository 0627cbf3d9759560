"""Billing as persisted: prices and balances, the ledger's postings, metering
intervals, statements. The arithmetic is the pure `gpudock.billing`."""

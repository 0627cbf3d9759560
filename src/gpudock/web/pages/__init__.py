"""The console's pages, one module per area, each with its `router` (mounted by
`web.console`): auth (login, account, language), instances (dashboard, list,
create form, detail, live fragments), ssh_keys, tokens, billing, images, and
the operators' admin (hosts, users), billing_admin (prices, top-ups) and
health (faults, repair, reliability)."""

"""Services own transactions and the rules; routers and the CLI only call them."""

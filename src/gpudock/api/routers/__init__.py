"""Thin routers: parse, authorise, call one service function, convert."""

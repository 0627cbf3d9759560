"""Who people are: users, API tokens, account states, console logins."""

"""The log's rules: a conversation's records applied, its turns, head and states, what a turn is shown."""

"""Energy: a machine's draw and its account (`account`), and how an account is kept in status
and checkpointed at each pass (`status`)."""

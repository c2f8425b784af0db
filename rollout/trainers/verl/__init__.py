"""verl: ``handoff`` builds the padded torch batch; ``agent_loop`` is the verl agent loop named ``agentenvs``."""

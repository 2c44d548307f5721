"""OpsCopilot: retrieval, prompting, the service object, the web API and the CLI."""

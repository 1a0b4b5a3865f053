"""Agent framework adapters, one module per framework, each behind its own extra.

- :mod:`toolswap.adapters.langchain` (``toolswap[langchain]``): LangChain v1 / LangGraph
  agent middleware that externalizes large tool results, and the read tools as
  LangChain tools.
- :mod:`toolswap.adapters.openai_agents` (``toolswap[openai-agents]``): the read tools as
  OpenAI Agents SDK function tools whose errors reach the model, and a wrapper for your own
  function tools.
- :mod:`toolswap.adapters.pydantic_ai` (``toolswap[pydantic-ai]``): a toolset wrapper that
  externalizes large results, and the read tools as a toolset.

Nothing is imported here, so ``import toolswap`` never needs a framework.
"""

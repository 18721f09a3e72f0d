"""A request's structured output, checked before decoding starts: the grammar its fields
ask for, compiled for the served tokenizer, or a 400 naming the field at fault."""

from __future__ import annotations

from ..data.tokenizer import Tokenizer
from ..inference.grammar import Grammar
from .errors import ApiError
from .schema import GRAMMAR_PARAMS, Sampled


def request_grammar(body: Sampled, tokenizer: Tokenizer) -> Grammar | None:
    """What ``body``'s text must follow (None: free text), once known to compile for
    ``tokenizer``; a schema, regex or tokenizer that cannot be compiled is a 400 naming
    ``response_format``, ``guided_regex`` or ``guided_choice``, with the library's reason
    on one line."""
    grammar = body.grammar()
    if grammar is None:
        return None
    try:
        grammar.check(tokenizer)
    except ValueError as error:
        param = GRAMMAR_PARAMS[grammar.kind]
        raise ApiError(400, f"{param}: {' '.join(str(error).split())}", param) from None
    return grammar

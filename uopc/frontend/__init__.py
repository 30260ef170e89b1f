"""The text front end: the Lark grammar (grammar/uop.lark), the parser, legacy forms and the printer."""
from uopc.frontend.parser import load_module, parse_source
from uopc.frontend.printer import format_arg, print_module, print_uops, show_module

__all__ = ["load_module", "parse_source", "print_module", "print_uops", "show_module", "format_arg"]

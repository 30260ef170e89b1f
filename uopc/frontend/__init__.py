"""The text front end: the Lark grammar (grammar/uop.lark), the parser, legacy forms and the printer."""

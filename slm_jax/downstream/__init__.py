"""Downstream evaluation (paper §4, SPEC §11): the 11 multiple-choice tasks, XSum and BoolQ.

`example` holds the one record every reader returns and every prompt builder reads.
"""

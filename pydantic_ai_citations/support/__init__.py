"""Support check: does the cited page hold a passage that backs the claim?"""

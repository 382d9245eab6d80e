"""Configurations for the engines people already use, written from one Plan."""

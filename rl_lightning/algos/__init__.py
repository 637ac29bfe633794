"""algos"""
